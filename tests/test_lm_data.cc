// Tests for apps/lm/data.*, tokenizer.cc and runtime.* (no MPI, no torch): bible line parsing, the token
// cache's verification, windows and their targets, the unigram baseline against a direct
// fp64 twin.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "burst/error.h"
#include "lm/data.h"
#include "lm/runtime.h"
#include "lm/vocab.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace fs = std::filesystem;
using burst::lm::Corpus;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("burst_test_lm_data_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// 3 books of lengths 5, 1, 6 over a vocabulary of 7.
Corpus write_small(const fs::path& dir) {
  const std::vector<std::int32_t> tokens{1, 2, 3, 1, 2, 6, 4, 4, 5, 0, 1, 2};
  burst::lm::write_corpus_cache(dir, tokens, {"Ge", "Ruth", "Rev"}, {0, 5, 6, 12}, 7);
  return burst::lm::load_corpus(dir);
}

}  // namespace

TEST(LmData, ParsesBibleLinesIntoBooks) {
  const auto v =
      burst::lm::parse_bible_lines("Ge1:1 In the beginning.\n1Sm12:3 And Samuel said\n\nRev22:21 Amen.\n");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].book, "Ge");
  EXPECT_EQ(v[0].text, "In the beginning.");
  EXPECT_EQ(v[1].book, "1Sm");  // leading digit belongs to the book
  EXPECT_EQ(v[2].book, "Rev");
  EXPECT_THROW(burst::lm::parse_bible_lines("no reference here\n"), burst::Error);
  EXPECT_THROW(burst::lm::parse_bible_lines("12:3 text without book\n"), burst::Error);
}

// --kjv-text: a saved `bible -f` listing is parsed exactly as the program's output would be, and
// a missing, short or malformed file is refused with its name in the message.
TEST(LmData, ReadsKjvFromSavedText) {
  const fs::path dir = temp_dir("kjv_text");
  fs::create_directories(dir);
  std::string text;
  for (int i = 0; i < 30001; ++i)
    text += (i < 20000 ? "Ge" : "Rev") + std::to_string(1 + i / 100) + ":" + std::to_string(1 + i % 100) +
            " verse " + std::to_string(i) + "\n";
  std::ofstream(dir / "kjv.txt", std::ios::binary) << text;
  const auto v = burst::lm::read_kjv(dir / "kjv.txt");
  const auto want = burst::lm::parse_bible_lines(text);
  ASSERT_EQ(v.size(), 30001u);
  for (std::size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(v[i].book, want[i].book) << i;
    ASSERT_EQ(v[i].text, want[i].text) << i;
  }
  EXPECT_EQ(v.front().book, "Ge");
  EXPECT_EQ(v.back().book, "Rev");
  EXPECT_EQ(v.back().text, "verse 30000");
  const auto refused = [](const fs::path& p) {
    try {
      burst::lm::read_kjv(p);
    } catch (const burst::Error& e) {
      return std::string(e.what()).find(p.filename().string()) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused(dir / "missing.txt"));
  std::ofstream(dir / "short.txt", std::ios::binary) << "Ge1:1 In the beginning.\n";
  EXPECT_TRUE(refused(dir / "short.txt"));
  std::ofstream(dir / "bad.txt", std::ios::binary) << text << "no reference here\n";
  EXPECT_THROW(burst::lm::read_kjv(dir / "bad.txt"), burst::Error);
  fs::remove_all(dir);
}

TEST(LmData, Fnv1aKnownVectors) {
  // Published FNV-1a 64 test vectors (Fowler/Noll/Vo): "" and "a".
  EXPECT_EQ(burst::lm::fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(burst::lm::fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
}

TEST(LmData, CacheRoundTripAndCorruptionIsRefused) {
  const fs::path dir = temp_dir("cache");
  const Corpus c = write_small(dir);
  EXPECT_EQ(c.num_tokens(), 12);
  EXPECT_EQ(c.num_books(), 3);
  EXPECT_EQ(c.book_of(0), 0);
  EXPECT_EQ(c.book_of(5), 1);
  EXPECT_EQ(c.book_of(11), 2);
  EXPECT_THROW(c.book_of(12), burst::Error);
  {  // flip one token id: the checksum must catch it
    std::fstream f(dir / "tokens.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    const std::int32_t x = 5;  // was 3
    f.write(reinterpret_cast<const char*>(&x), sizeof x);
  }
  try {
    burst::lm::load_corpus(dir);
    FAIL() << "corrupt cache accepted";
  } catch (const burst::Error& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  fs::resize_file(dir / "tokens.bin", 4);  // truncated
  EXPECT_THROW(burst::lm::load_corpus(dir), burst::Error);
  fs::remove_all(dir);
  try {
    burst::lm::load_corpus(dir);
    FAIL() << "missing cache accepted";
  } catch (const burst::Error& e) {
    EXPECT_NE(std::string(e.what()).find("kjv_prepare"), std::string::npos) << e.what();
  }
}

TEST(LmData, WindowTargetsStopAtBookBoundaries) {
  const fs::path dir = temp_dir("window");
  const Corpus c = write_small(dir);
  // Window [3, 10) padded to 8: books Ge [3,5), Ruth [5,6), Rev [6,10) + padding [10,11).
  const auto w = burst::lm::make_window(c, 3, 7, 8);
  EXPECT_EQ(w.cu_seqlens, (std::vector<std::int32_t>{0, 2, 3, 7, 8}));
  std::vector<std::int64_t> pos{0, 1, 2, 3, 4, 5, 6, 7}, in, tg;
  std::vector<float> wt;
  burst::lm::gather_window(c, w, pos, in, tg, wt);
  // Position 1 (token 4 of Ge) is the last of its book; 2 (Ruth) has no successor in Ruth;
  // 6 (corpus 9) continues into corpus 10 (same book, beyond the window); 7 is padding.
  EXPECT_EQ(wt, (std::vector<float>{1, 0, 0, 1, 1, 1, 1, 0}));
  EXPECT_EQ(in[0], 1);
  EXPECT_EQ(tg[0], 2);
  EXPECT_EQ(tg[6], 1);
  double sum = 0;
  for (float x : wt) sum += x;
  EXPECT_EQ(w.num_targets, static_cast<std::int64_t>(sum));
  fs::remove_all(dir);
}

TEST(LmData, UnigramPerplexityMatchesDirectTwin) {
  const fs::path dir = temp_dir("unigram");
  const Corpus c = write_small(dir);
  std::map<int, double> freq;
  for (int t : c.tokens) freq[t] += 1.0 / static_cast<double>(c.num_tokens());
  double nll = 0;
  int n = 0;
  for (int b = 0; b < c.num_books(); ++b)
    for (auto p = c.book_offsets[b] + 1; p < c.book_offsets[b + 1]; ++p, ++n)
      nll -= std::log(freq[c.tokens[static_cast<std::size_t>(p)]]);
  EXPECT_NEAR(burst::lm::unigram_perplexity(c), std::exp(nll / n), 1e-12);
  fs::remove_all(dir);
}

TEST(LmData, SplitMixIsDeterministic) {
  EXPECT_EQ(burst::lm::splitmix64(0), burst::lm::splitmix64(0));
  EXPECT_NE(burst::lm::splitmix64(1), burst::lm::splitmix64(2));
  EXPECT_EQ(burst::lm::splitmix64(0), 0xe220a8397b1dcdafULL);  // reference SplitMix64, state 0
}

// Vocab (the torch process's tokenizer) against libsentencepiece on a BPE model trained here.
TEST(LmData, VocabEncodesAndDecodesLikeSentencepiece) {
  const fs::path dir = temp_dir("spm");
  fs::create_directories(dir);
  {
    std::ofstream text(dir / "text.txt");
    for (int i = 0; i < 40; ++i)
      text << "In the beginning God created the heaven and the earth. And the earth was without form, and "
              "void; "
              "and darkness was upon the face of the deep "
           << i
           << ".\nAnd God said, Let there be light: and "
              "there was light. Jesus wept. Amen.\n";
  }
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + (dir / "text.txt").string() + " --model_prefix=" + (dir / "spm").string() +
      " --model_type=bpe --vocab_size=120 --character_coverage=1.0 --bos_id=-1 --eos_id=-1 --unk_id=0"
      " --pad_id=-1 --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((dir / "spm.model").string()).ok());
  const auto vocab = burst::lm::Vocab::load(dir);
  EXPECT_EQ(vocab.size(), sp.GetPieceSize());
  for (const std::string text :
       {"In the beginning", "And God said, Let there be light.", "  the   earth was void ", "Jesus wept.",
        "light: xyz Q!", "darkness upon the face of the deep 17"}) {
    std::vector<int> want;
    ASSERT_TRUE(sp.Encode(text, &want).ok());
    const auto got = vocab.encode(text);
    EXPECT_EQ(std::vector<int>(got.begin(), got.end()), want) << text;
    std::string want_text;
    ASSERT_TRUE(sp.Decode(want, &want_text).ok());
    EXPECT_EQ(vocab.decode(got), want_text) << text;
  }
  fs::remove_all(dir);
}
