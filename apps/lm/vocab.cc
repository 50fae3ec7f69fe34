// Sentencepiece-compatible BPE encode / decode from spm.vocab (vocab.h).
#include "vocab.h"

#include <fstream>
#include <sstream>

#include "burst/error.h"

namespace burst::lm {
namespace {

const std::string kSpace = "\xe2\x96\x81";  // U+2581 "▁", sentencepiece's whitespace mark

// Bytes of the UTF-8 character starting with lead byte c.
std::size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xe) return 3;
  if ((c >> 3) == 0x1e) return 4;
  return 1;
}

}  // namespace

Vocab::Vocab(std::vector<std::string> pieces, std::vector<float> scores)
    : pieces_(std::move(pieces)), scores_(std::move(scores)) {
  BURST_CHECK(pieces_.size() == scores_.size() && !pieces_.empty(), InvalidArgument,
              "vocab: ", pieces_.size(), " pieces but ", scores_.size(), " scores");
  for (std::size_t i = 0; i < pieces_.size(); ++i) index_.emplace(pieces_[i], static_cast<std::int32_t>(i));
  const auto it = index_.find("<unk>");
  unk_ = it == index_.end() ? 0 : it->second;
}

Vocab Vocab::load(const std::filesystem::path& data_dir) {
  const auto path = data_dir / "spm.vocab";
  std::ifstream in(path);
  BURST_CHECK(in.good(), InvalidArgument, "cannot read ", path.string(), ": run kjv_prepare --data ",
              data_dir.string());
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    BURST_CHECK(tab != std::string::npos, InvalidArgument, path.string(), ": malformed line '", line, "'");
    pieces.push_back(line.substr(0, tab));
    scores.push_back(std::stof(line.substr(tab + 1)));
  }
  return Vocab(std::move(pieces), std::move(scores));
}

std::vector<std::int32_t> Vocab::encode(const std::string& text) const {
  std::string norm;  // whitespace runs → one "▁", trimmed, with the dummy prefix
  bool pending = true;
  for (const char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      pending = true;
      continue;
    }
    if (pending) norm += kSpace;
    pending = false;
    norm += c;
  }
  std::vector<std::string> sym;
  for (std::size_t i = 0; i < norm.size();) {
    const std::size_t n = utf8_len(static_cast<unsigned char>(norm[i]));
    sym.push_back(norm.substr(i, n));
    i += n;
  }
  for (;;) {  // merge the best-scoring adjacent pair until none is a piece
    std::size_t best = sym.size();
    float best_score = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = index_.find(sym[i] + sym[i + 1]);
      if (it == index_.end()) continue;
      const float s = scores_[static_cast<std::size_t>(it->second)];
      if (best == sym.size() || s > best_score) {
        best = i;
        best_score = s;
      }
    }
    if (best == sym.size()) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  std::vector<std::int32_t> ids;
  bool prev_unknown = false;  // a run of unknown symbols becomes ONE <unk>, as in sentencepiece
  for (const auto& s : sym) {
    const auto it = index_.find(s);
    if (it == index_.end() && prev_unknown) continue;
    prev_unknown = it == index_.end();
    ids.push_back(prev_unknown ? unk_ : it->second);
  }
  return ids;
}

std::string Vocab::piece_text(std::int32_t id) const {
  if (id < 0 || id >= size()) return "";
  std::string p = pieces_[static_cast<std::size_t>(id)];
  if (id == unk_) return " \xe2\x81\x87 ";  // sentencepiece's rendering of <unk>: " ⁇ "
  std::string out;
  for (std::size_t i = 0; i < p.size();) {
    if (p.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += p[i++];
    }
  }
  return out;
}

std::string Vocab::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (const auto id : ids) out += piece_text(id);
  if (!out.empty() && out[0] == ' ') out.erase(0, 1);  // the dummy prefix
  return out;
}

}  // namespace burst::lm
