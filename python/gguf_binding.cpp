// python/gguf_binding.cpp — kvevict.read_gguf: a GGUF file's metadata and its tensors dequantized to
// float32 NumPy arrays, through the llama2 engine's checked reader (tools/llama2/gguf.hpp).
// SPDX-License-Identifier: Apache-2.0
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "llama2/dequantize.hpp"
#include "llama2/gguf.hpp"

namespace py = pybind11;

namespace {

py::object to_python(const llama2::gguf::Value& v) {
  using llama2::gguf::ValueType;
  switch (v.type) {
    case ValueType::STRING: return py::bytes(v.s).attr("decode")("utf-8", "replace");
    case ValueType::FLOAT32: case ValueType::FLOAT64: return py::float_(v.f);
    case ValueType::BOOL: return py::bool_(v.i != 0);
    case ValueType::UINT64: return py::int_(v.u);
    case ValueType::ARRAY: {
      py::list out;
      for (const auto& s : v.strings) out.append(py::bytes(s).attr("decode")("utf-8", "replace"));
      for (double f : v.floats) out.append(f);
      for (std::int64_t i : v.ints) out.append(i);
      return std::move(out);
    }
    default: return py::int_(v.i);
  }
}

py::dict read_gguf(const std::string& path) {
  const llama2::gguf::File f = llama2::gguf::File::open(path);
  py::dict metadata, tensors, types;
  for (const auto& [key, value] : f.metadata()) metadata[py::str(key)] = to_python(value);
  for (const auto& t : f.tensors()) {
    if (!llama2::gguf::can_dequantize(t.type)) continue;  // listed in "types"; not converted
    std::vector<py::ssize_t> shape(t.ne.rbegin(), t.ne.rend());  // outermost first: [out][in] row-major
    py::array_t<float> a(shape);
    llama2::gguf::dequantize(t.type, t.data, a.mutable_data(), static_cast<std::size_t>(t.elements));
    tensors[py::str(t.name)] = a;
  }
  for (const auto& t : f.tensors())
    types[py::str(t.name)] = llama2::gguf::tensor_type_name(static_cast<std::uint32_t>(t.type));
  py::dict out;
  out["metadata"] = metadata;
  out["tensors"] = tensors;
  out["types"] = types;
  return out;
}

}  // namespace

void bind_gguf(py::module_& m) {
  m.def("read_gguf", &read_gguf, py::arg("path"),
        R"doc(read_gguf(path) -> dict: a GGUF v2/v3 file read by kvevict's checked reader.

"metadata": {key: value} (ints, floats, bools, str, lists); "tensors": {name: float32 ndarray}, every tensor of
a type the reader dequantizes (f32, f16, bf16, q8_0, q4_0, q4_1, q4_K, q5_K, q6_K), shaped outermost first (a
weight [out][in], row-major, as y = W @ x uses it); "types": {name: ggml type name} for every tensor.
Raises ValueError naming the key or tensor for a malformed file (truncated, huge counts, unknown type).
Memory: 4 bytes per parameter.)doc");
}
