// cmake/gcc_constant_vector_check.cpp — configure-time check for a GCC 12 wrong-code bug at AVX-512.
// g++ 12.2 (Debian 12) at -O2 or -O3 with -march=x86-64-v4 stores the constant {1, 1, 1, 0} of this
// std::vector as a broadcast of 1.0 (vpbroadcastq): the vector reads {1, 1, 1, 1}. The SLP vectorizer
// builds that constant; -fno-tree-slp-vectorize avoids it. Exit 0: correct code; 1: the bug is present.
#include <vector>

__attribute__((noinline)) static int last_is_zero(const std::vector<double>& w) { return w[3] == 0.0 ? 0 : 1; }

int main() {
  std::vector<double> w{1, 1, 1, 0};
  return last_is_zero(w);
}
