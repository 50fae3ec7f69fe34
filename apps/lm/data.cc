// apps/lm/data.cc — the token cache: write, load, verify; unigram baseline. No sentencepiece
// here (see tokenizer.cc).
#include "data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "burst/error.h"

namespace burst::lm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kCacheVersion = 1;

}  // namespace

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  BURST_CHECK(in, InvalidArgument, "cannot open ", path.string());
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

namespace {

void write_file(const fs::path& path, const void* data, std::size_t bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    BURST_CHECK(out, InvalidArgument, "cannot write ", tmp.string());
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    BURST_CHECK(out.good(), InvalidArgument, "short write to ", tmp.string());
  }
  fs::rename(tmp, path);  // atomic: a reader never sees a half-written file
}

}  // namespace

int Corpus::book_of(std::int64_t pos) const {
  BURST_CHECK(pos >= 0 && pos < num_tokens(), InvalidArgument, "position ", pos, " outside the corpus of ",
              num_tokens(), " tokens");
  const auto it = std::upper_bound(book_offsets.begin(), book_offsets.end(), pos);
  return static_cast<int>(it - book_offsets.begin()) - 1;
}

std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

void write_corpus_cache(const fs::path& dir, const std::vector<std::int32_t>& tokens,
                        const std::vector<std::string>& book_names,
                        const std::vector<std::int64_t>& book_offsets, int vocab_size) {
  BURST_CHECK(!book_names.empty() && book_offsets.size() == book_names.size() + 1 &&
                  book_offsets.front() == 0 &&
                  book_offsets.back() == static_cast<std::int64_t>(tokens.size()) &&
                  std::is_sorted(book_offsets.begin(), book_offsets.end()),
              InvalidArgument, "book offsets must run 0 .. ", tokens.size(), " over ", book_names.size(),
              " books (got ", book_offsets.size(), " offsets)");
  fs::create_directories(dir);
  json books = json::array();
  for (std::size_t b = 0; b < book_names.size(); ++b)
    books.push_back({{"name", book_names[b]}, {"token_begin", book_offsets[b]}});
  const std::size_t bytes = tokens.size() * sizeof(std::int32_t);
  write_file(dir / "tokens.bin", tokens.data(), bytes);
  json meta = {{"version", kCacheVersion},
               {"source", "bible -f \"Gen1:1-Rev22:21\" (bible-kjv), reference field stripped"},
               {"vocab_size", vocab_size},
               {"tokens", tokens.size()},
               {"tokens_bytes", bytes},
               {"tokens_fnv1a64", hex64(fnv1a64(tokens.data(), bytes))},
               {"books", books}};
  if (fs::exists(dir / "spm.model")) {
    const std::string model = read_file(dir / "spm.model");
    meta["spm_model_fnv1a64"] = hex64(fnv1a64(model.data(), model.size()));
  }
  const std::string text = meta.dump(1);
  write_file(dir / "meta.json", text.data(), text.size());
}

Corpus load_corpus(const fs::path& dir) {
  const std::string fix =
      " — build it with `build/apps/kjv_prepare --data " + dir.string() + "` (or scripts/run_main.sh)";
  BURST_CHECK(fs::exists(dir / "meta.json"), InvalidArgument, "no token cache in ", dir.string(), fix);
  const json meta = json::parse(read_file(dir / "meta.json"));
  BURST_CHECK(meta.value("version", 0) == kCacheVersion, InvalidArgument, "cache version ",
              meta.value("version", 0), " in ", dir.string(), " is not ", kCacheVersion, fix);
  const auto bytes = meta.at("tokens_bytes").get<std::uint64_t>();
  BURST_CHECK(fs::exists(dir / "tokens.bin") && fs::file_size(dir / "tokens.bin") == bytes, InvalidArgument,
              dir.string(), "/tokens.bin is missing or not ", bytes,
              " bytes (corrupt cache): delete the directory", fix);
  Corpus c;
  c.tokens.resize(bytes / sizeof(std::int32_t));
  {
    std::ifstream in(dir / "tokens.bin", std::ios::binary);
    in.read(reinterpret_cast<char*>(c.tokens.data()), static_cast<std::streamsize>(bytes));
    BURST_CHECK(in.good(), InvalidArgument, "short read of ", (dir / "tokens.bin").string(), fix);
  }
  c.checksum = fnv1a64(c.tokens.data(), bytes);
  BURST_CHECK(hex64(c.checksum) == meta.at("tokens_fnv1a64").get<std::string>(), InvalidArgument,
              dir.string(), "/tokens.bin checksum ", hex64(c.checksum),
              " != ", meta.at("tokens_fnv1a64").get<std::string>(),
              " recorded in meta.json (corrupt cache): "
              "delete the directory",
              fix);
  c.vocab_size = meta.at("vocab_size").get<int>();
  for (const json& b : meta.at("books")) {
    c.book_names.push_back(b.at("name").get<std::string>());
    c.book_offsets.push_back(b.at("token_begin").get<std::int64_t>());
  }
  c.book_offsets.push_back(c.num_tokens());
  BURST_CHECK(!c.book_names.empty() && c.book_offsets.front() == 0 &&
                  std::is_sorted(c.book_offsets.begin(), c.book_offsets.end()),
              InvalidArgument, "book offsets in ", dir.string(), "/meta.json are not increasing", fix);
  for (std::int32_t t : c.tokens)
    BURST_CHECK(t >= 0 && t < c.vocab_size, InvalidArgument, "token id ", t, " outside vocab ", c.vocab_size,
                fix);
  return c;
}

double unigram_perplexity(const Corpus& corpus) {
  std::vector<double> count(static_cast<std::size_t>(corpus.vocab_size), 0.0);
  for (std::int32_t t : corpus.tokens) count[static_cast<std::size_t>(t)] += 1.0;
  const double total = static_cast<double>(corpus.num_tokens());
  double nll = 0;
  std::int64_t n = 0;
  for (int b = 0; b < corpus.num_books(); ++b)
    for (std::int64_t p = corpus.book_offsets[b] + 1; p < corpus.book_offsets[b + 1]; ++p, ++n)
      nll -= std::log(count[static_cast<std::size_t>(corpus.tokens[static_cast<std::size_t>(p)])] / total);
  return std::exp(nll / static_cast<double>(std::max<std::int64_t>(n, 1)));
}

}  // namespace burst::lm
