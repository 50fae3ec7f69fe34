// tests/lm_test_corpus.h — the synthetic corpus of the language-model tests: `books` books of a
// Markov-ish stream over 48 tokens (t ← (5t + 1 + U{0,1,2}) mod 48, seeded), book b holding
// base_len + b·len_step tokens. Learnable in a few steps, and training windows span book
// boundaries (document-causal masks with several documents). Written as a token cache
// (apps/lm/data.h write_corpus_cache) with 48 tokens of vocabulary and books named A, B, ...
// (letters repeat past 26 books)
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "lm/data.h"

namespace burst::test {

inline void write_markov_corpus(const std::filesystem::path& data_dir, unsigned seed, int books, int base_len,
                                int len_step) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::string> names;
  for (int b = 0; b < books; ++b) {
    std::int32_t t = b;
    for (int i = 0; i < base_len + len_step * b; ++i) {
      t = static_cast<std::int32_t>((t * 5 + 1 + static_cast<int>(rng() % 3)) % 48);
      tokens.push_back(t);
    }
    offsets.push_back(static_cast<std::int64_t>(tokens.size()));
    names.emplace_back(1, static_cast<char>('A' + b % 26));
  }
  lm::write_corpus_cache(data_dir, tokens, names, offsets, 48);
}

}  // namespace burst::test
