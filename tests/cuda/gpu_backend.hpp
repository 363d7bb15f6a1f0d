// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// tests/cuda/gpu_backend.hpp — the `Backend` that runs the CUDA kernels (kernels.cuh): it
// copies a `BatchHost` to device memory, launches on one stream, and copies it back (the
// copies are the test's, around the launches; the launches themselves never copy).
#pragma once

#include <memory>
#include <string>

#include "batch_host.hpp"

namespace kvtest_cuda {

/// A backend on CUDA device 0. Throws `std::runtime_error` if there is no device.
std::unique_ptr<Backend> make_gpu_backend();
/// "NVIDIA H200, driver 12.x, runtime 13.0, sm_90, 132 SMs, 139.8 GiB" (device 0), or throws.
std::string gpu_description();

}  // namespace kvtest_cuda
