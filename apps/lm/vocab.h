// apps/lm/vocab.h — the KJV tokenizer's vocabulary without sentencepiece: encode a prompt and
// decode generated ids inside the torch process (libsentencepiece and libtorch cannot share one,
// see tokenizer.cc).
//
// Reads spm.vocab, the text file sentencepiece's trainer writes beside spm.model ("piece\tscore"
// per line, line i = id i). Encoding is sentencepiece's BPE: normalise whitespace (runs → one
// space, trimmed), prepend the dummy prefix, spaces → "▁", split into characters, then repeatedly
// merge the adjacent pair whose concatenation is a piece with the highest score (leftmost on
// ties); a run of characters outside the vocabulary becomes one <unk>. Decoding concatenates the pieces and
// turns "▁" back into spaces. test_lm_data checks both against libsentencepiece.
// Does not: apply NFKC beyond whitespace (the KJV prompts used here are ASCII).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

namespace burst::lm {

class Vocab {
 public:
  /// Loads <data_dir>/spm.vocab. Throws Error(InvalidArgument) naming the file when it is
  /// missing or a line is malformed ("run kjv_prepare").
  static Vocab load(const std::filesystem::path& data_dir);
  /// From pieces and scores (id = index); the unknown piece is "<unk>" (id 0 if absent).
  Vocab(std::vector<std::string> pieces, std::vector<float> scores);

  int size() const { return static_cast<int>(pieces_.size()); }
  std::vector<std::int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;
  /// One id's text ("▁" → space); "" for ids out of range.
  std::string piece_text(std::int32_t id) const;

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, std::int32_t> index_;
  std::int32_t unk_ = 0;
};

}  // namespace burst::lm
