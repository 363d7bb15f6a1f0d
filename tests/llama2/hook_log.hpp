// tests/llama2/hook_log.hpp — an EngineHooks that writes every call as a line, for the tests of the hooks.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "llama2/engine.hpp"

namespace llama2_test {

/// Writes every hook call as a line into `out`: "rot L P", "att L N", "cache L prompt|step". The rotary
/// position returned is `position + shift` (a shift moves the RoPE, so a caller that skipped the hook
/// would compute other logits).
class HookLog final : public llama2::EngineHooks {
 public:
  explicit HookLog(std::vector<std::string>& out, std::size_t shift = 0) : out_(out), shift_(shift) {}
  std::size_t rotary_position(const llama2::Engine&, std::size_t layer, std::size_t position) override {
    out_.push_back("rot " + std::to_string(layer) + " " + std::to_string(position));
    return position + shift_;
  }
  void decode_attention(const llama2::Engine&, std::size_t layer, const float*, std::size_t n) override {
    out_.push_back("att " + std::to_string(layer) + " " + std::to_string(n));
  }
  void after_cache(llama2::Engine&, std::size_t layer, kvevict::CacheInterface&, bool prompt) override {
    out_.push_back("cache " + std::to_string(layer) + (prompt ? " prompt" : " step"));
  }

 private:
  std::vector<std::string>& out_;
  std::size_t shift_;
};

}  // namespace llama2_test
