// apps/lm/data.h — the King James Bible as token ids: extraction, tokenizer, cache.
//
// Owns: turning `bible -f "Gen1:1-Rev22:21"` (Debian bible-kjv; or a file holding what it
// prints, for a host without the package) into 66 documents (one per book), training a
// sentencepiece BPE tokenizer on the verses, and caching the token ids and book offsets in a
// data directory (tokens.bin int32 little-endian, meta.json with sizes and FNV-1a 64 checksums,
// spm.model). A cache that exists is reused after its size and checksum are verified; a
// mismatched one is refused with a message saying how to rebuild it.
// Does not: know about models, ranks or torch.
// Program: kjv_prepare (apps/lm/prepare_main.cc) builds the cache; burst train/eval read it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace burst::lm {

/// The tokenised corpus. tokens.size() = book_offsets.back(); book i spans
/// [book_offsets[i], book_offsets[i+1]) — the document cu_seqlens of the whole Bible.
struct Corpus {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> book_offsets;  ///< size num_books + 1, book_offsets[0] = 0
  std::vector<std::string> book_names;     ///< "Ge", "Exo", ..., "Rev"
  int vocab_size = 0;
  std::uint64_t checksum = 0;  ///< FNV-1a 64 of tokens.bin

  std::int64_t num_tokens() const { return static_cast<std::int64_t>(tokens.size()); }
  int num_books() const { return static_cast<int>(book_names.size()); }
  /// Index of the book holding global token position `pos` (binary search).
  int book_of(std::int64_t pos) const;
};

struct PrepareOptions {
  std::filesystem::path data_dir = "data/kjv";
  int vocab_size = 2048;
  int threads = 2;      ///< sentencepiece trainer threads
  bool verbose = true;  ///< progress lines on stderr
  /// A file holding exactly what `bible -f "Gen1:1-Rev22:21"` prints, read instead of running
  /// `bible` (a host without bible-kjv); empty: run `bible`. The cache is the same either way.
  std::filesystem::path kjv_text;
};

/// One verse: book abbreviation and text (reference stripped).
struct Verse {
  std::string book;
  std::string text;
};

/// Parses `bible` output lines ("Ge1:1 In the beginning ..."): the first field minus its
/// trailing "chapter:verse" is the book. Throws Error(InvalidArgument) on a malformed line
/// (message quotes it).
std::vector<Verse> parse_bible_lines(const std::string& text);

// The next three live in tokenizer.cc, linked only into the `kjv_prepare` program (libsentencepiece
// and libtorch cannot share a process: their protobuf copies clash).

/// Runs `bible -f "Gen1:1-Rev22:21"` and parses it; with a non-empty `kjv_text`, parses that file
/// instead (what the command prints, saved). Throws Error(Unsupported) with the apt-get command
/// when the program is missing or prints fewer than 30,000 verses, Error(InvalidArgument) naming
/// the file when it cannot be read, holds fewer verses or has a malformed line.
std::vector<Verse> read_kjv(const std::filesystem::path& kjv_text = {});

/// The whole file as bytes. Throws Error(InvalidArgument) naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

/// "%016x" of a 64-bit checksum, as stored in meta.json and checkpoint headers.
std::string hex64(std::uint64_t v);

/// FNV-1a 64 over bytes (checksums of the cache files and checkpoints).
std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t seed = 0xcbf29ce484222325ULL);

/// Builds the cache in opts.data_dir unless a valid one exists (then only verifies it).
/// Returns true when it built something. Not collective: run it once, before mpirun.
/// Throws: Error(InvalidArgument) when an existing cache has another vocab size or fails
/// verification (message names the directory and the fix); Error(Unsupported) when bible-kjv
/// or sentencepiece fails. Cost: ~10–30 s (tokenizer training), then ~1 s to reuse.
bool prepare_corpus(const PrepareOptions& opts);

/// Writes a cache (tokens.bin, meta.json; meta last, so a half-written cache is never taken
/// for a complete one) for `tokens` split into books at `book_offsets` (size books + 1,
/// starting at 0, ending at tokens.size()). prepare_corpus uses it; tests use it for
/// synthetic corpora. Throws Error(InvalidArgument) on inconsistent offsets or I/O failure.
void write_corpus_cache(const std::filesystem::path& data_dir, const std::vector<std::int32_t>& tokens,
                        const std::vector<std::string>& book_names,
                        const std::vector<std::int64_t>& book_offsets, int vocab_size);

/// Loads and verifies the cache. Throws Error(InvalidArgument) with "run kjv_prepare" when
/// the directory is missing or incomplete, and when sizes or checksums do not match meta.json.
Corpus load_corpus(const std::filesystem::path& data_dir);

/// Unigram (context-free) perplexity of the corpus under its own token frequencies, counting
/// the same predicted positions as the model (every token except the first of each book):
/// exp(−Σ log p(t) / n). The baseline a trained model must beat.
double unigram_perplexity(const Corpus& corpus);

}  // namespace burst::lm
