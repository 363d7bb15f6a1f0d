// kvevict tools — replay/input_error.hpp: InputError, the one error type of the trace and .npy readers.
// SPDX-License-Identifier: Apache-2.0
//
// Its own header so that npy.cpp and trace.cpp both use it without including each other.
#pragma once

#include <stdexcept>
#include <string>

namespace replay {

/// Bad input (a file, a field or an option): the message is "<field>: <problem>".
/// kvevict-replay prints it as one line and exits with code 2.
class InputError : public std::runtime_error {
 public:
  InputError(const std::string& field, const std::string& problem) : std::runtime_error(field + ": " + problem) {}
};

}  // namespace replay
