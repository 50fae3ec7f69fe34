// apps/lm/tokenizer.cc — KJV extraction and sentencepiece BPE training (the `kjv_prepare`
// program). Kept out of burst_lm: libsentencepiece embeds its own protobuf-lite, which clashes
// with the libprotobuf that libtorch loads (a crash in static initialisation when both are in
// one process), so the tokenizer runs in a process without torch.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "burst/error.h"
#include "data.h"

namespace burst::lm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kBibleCommand = "bible -f \"Gen1:1-Rev22:21\" 2>/dev/null";
constexpr const char* kInstallHint =
    "install it with `sudo apt-get install bible-kjv bible-kjv-text` "
    "(or run scripts/setup.sh)";

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  BURST_CHECK(out.good(), InvalidArgument, "cannot write ", path.string());
}

struct PipeCloser {
  void operator()(FILE* f) const {
    if (f) pclose(f);
  }
};

std::string run_bible() {
  std::unique_ptr<FILE, PipeCloser> pipe(popen(kBibleCommand, "r"));
  BURST_CHECK(pipe, Unsupported, "cannot run `bible`: ", kInstallHint);
  std::string out;
  std::array<char, 1 << 16> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  return out;
}

}  // namespace

std::vector<Verse> parse_bible_lines(const std::string& text) {
  std::vector<Verse> verses;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto space = line.find(' ');
    const std::string ref = line.substr(0, space);
    const auto colon = ref.rfind(':');
    BURST_CHECK(space != std::string::npos && colon != std::string::npos && colon > 0, InvalidArgument,
                "malformed bible line (want \"<Book><chapter>:<verse> <text>\"): \"", line, "\"");
    std::size_t book_end = colon;  // strip the chapter digits before the colon
    while (book_end > 0 && std::isdigit(static_cast<unsigned char>(ref[book_end - 1]))) --book_end;
    BURST_CHECK(book_end > 0 && book_end < colon, InvalidArgument, "malformed reference \"", ref,
                "\" in line \"", line, "\"");
    verses.push_back({ref.substr(0, book_end), line.substr(space + 1)});
  }
  return verses;
}

std::vector<Verse> read_kjv(const fs::path& kjv_text) {
  if (!kjv_text.empty()) {
    BURST_CHECK(fs::is_regular_file(kjv_text), InvalidArgument, "KJV text ", kjv_text.string(),
                " is not a file (want what `bible -f \"Gen1:1-Rev22:21\"` prints, saved)");
    std::vector<Verse> verses = parse_bible_lines(read_file(kjv_text));
    BURST_CHECK(verses.size() > 30000, InvalidArgument, "KJV text ", kjv_text.string(), " holds ",
                verses.size(), " verses, expected 31102 (what `bible -f \"Gen1:1-Rev22:21\"` prints)");
    return verses;
  }
  std::vector<Verse> verses = parse_bible_lines(run_bible());
  BURST_CHECK(verses.size() > 30000, Unsupported, "`bible -f \"Gen1:1-Rev22:21\"` printed ", verses.size(),
              " verses, expected 31102: ", kInstallHint, ", or pass --kjv-text FILE");
  return verses;
}

bool prepare_corpus(const PrepareOptions& opts) {
  const fs::path dir = opts.data_dir;
  BURST_CHECK(opts.vocab_size >= 300 && opts.vocab_size <= 65536, InvalidArgument,
              "vocab_size=", opts.vocab_size, " outside [300, 65536]");
  if (fs::exists(dir / "meta.json")) {
    const json meta = json::parse(read_file(dir / "meta.json"));
    BURST_CHECK(meta.value("vocab_size", 0) == opts.vocab_size, InvalidArgument, "data directory ",
                dir.string(), " holds a cache with vocab_size=", meta.value("vocab_size", 0),
                ", not the requested ", opts.vocab_size, ": pass another --data directory or delete it");
    const Corpus c = load_corpus(dir);  // verifies sizes and checksums
    if (opts.verbose)
      std::cerr << "prepare: reusing " << dir.string() << " (" << c.num_tokens() << " tokens, "
                << c.num_books() << " books, vocab " << c.vocab_size << ", checksum verified)\n";
    return false;
  }
  fs::create_directories(dir);
  if (opts.verbose)
    std::cerr << "prepare: extracting the KJV "
              << (opts.kjv_text.empty() ? std::string("with `bible`") : "from " + opts.kjv_text.string())
              << "...\n";
  const std::vector<Verse> verses = read_kjv(opts.kjv_text);
  std::string plain;
  for (const Verse& v : verses) plain += v.text + "\n";
  write_text(dir / "kjv.txt", plain);

  if (opts.verbose)
    std::cerr << "prepare: training a sentencepiece BPE tokenizer, vocab " << opts.vocab_size << " ("
              << verses.size() << " verses)...\n";
  std::ostringstream args;
  args << "--input=" << (dir / "kjv.txt").string() << " --model_prefix=" << (dir / "spm").string()
       << " --model_type=bpe --vocab_size=" << opts.vocab_size
       << " --character_coverage=1.0 --bos_id=-1 --eos_id=-1 --unk_id=0 --pad_id=-1"
       << " --num_threads=" << std::max(1, opts.threads) << " --minloglevel=2";
  const auto status = sentencepiece::SentencePieceTrainer::Train(args.str());
  BURST_CHECK(status.ok(), Unsupported, "sentencepiece training failed: ", status.ToString(),
              " (is libsentencepiece-dev installed? run scripts/setup.sh)");

  sentencepiece::SentencePieceProcessor sp;
  const auto load = sp.Load((dir / "spm.model").string());
  BURST_CHECK(load.ok(), Unsupported, "cannot load ", (dir / "spm.model").string(), ": ", load.ToString());
  std::vector<std::int32_t> tokens;
  std::vector<std::string> names;
  std::vector<std::int64_t> offsets;
  std::vector<int> ids;
  for (std::size_t i = 0; i < verses.size(); ++i) {
    if (i == 0 || verses[i].book != verses[i - 1].book) {
      names.push_back(verses[i].book);
      offsets.push_back(static_cast<std::int64_t>(tokens.size()));
    }
    ids.clear();
    const auto enc = sp.Encode(verses[i].text, &ids);
    BURST_CHECK(enc.ok(), Internal, "sentencepiece encode failed: ", enc.ToString());
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  offsets.push_back(static_cast<std::int64_t>(tokens.size()));
  write_corpus_cache(dir, tokens, names, offsets, opts.vocab_size);
  if (opts.verbose)
    std::cerr << "prepare: wrote " << tokens.size() << " tokens in " << names.size() << " books to "
              << dir.string() << "\n";
  return true;
}

}  // namespace burst::lm
