// lm_test_corpus: writes the language-model tests' synthetic token cache (tests/lm_test_corpus.h)
// for tests that run `burst-lm train` as a program (tests/multinode_faults.sh resume).
// Usage: lm_test_corpus DATA_DIR [SEED BOOKS BASE_LEN LEN_STEP]   (defaults 11 5 150 70)
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "lm_test_corpus.h"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 6) {
    std::fprintf(stderr, "usage: %s DATA_DIR [SEED BOOKS BASE_LEN LEN_STEP]\n", argv[0]);
    return 2;
  }
  const auto arg = [&](int i, int fallback) { return argc == 6 ? std::atoi(argv[i]) : fallback; };
  try {
    burst::test::write_markov_corpus(argv[1], static_cast<unsigned>(arg(2, 11)), arg(3, 5), arg(4, 150),
                                     arg(5, 70));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lm_test_corpus: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
