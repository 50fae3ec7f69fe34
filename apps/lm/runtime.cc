// apps/lm/runtime.cc
#include "runtime.h"

#include <sys/resource.h>

#include "burst/error.h"
#include "burst/splitmix64.h"

namespace burst::lm {

void all_reduce_sum_f64(const Communicator& comm, std::vector<double>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  std::vector<float> send(static_cast<std::size_t>(2 * n));
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = values[static_cast<std::size_t>(i)];
    const float hi = static_cast<float>(x);
    send[static_cast<std::size_t>(2 * i)] = hi;
    send[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(x - static_cast<double>(hi));
  }
  const int P = comm.size();
  std::vector<float> recv(static_cast<std::size_t>(2 * n * P));
  comm.all_gather(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(recv)));
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int r = 0; r < P; ++r) {
      const std::size_t o = static_cast<std::size_t>(r * 2 * n + 2 * i);
      s += static_cast<double>(recv[o]) + static_cast<double>(recv[o + 1]);
    }
    values[static_cast<std::size_t>(i)] = s;
  }
}

std::int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::int64_t>(u.ru_maxrss) * 1024;
}

std::uint64_t splitmix64(std::uint64_t x) { return SplitMix64(x).next(); }

Window make_window(const Corpus& corpus, std::int64_t begin, std::int64_t S, std::int64_t S_padded) {
  BURST_CHECK(S > 0 && begin >= 0 && begin + S <= corpus.num_tokens() && S_padded >= S, InvalidArgument,
              "window [", begin, ", ", begin + S, ") padded to ", S_padded, " does not fit the corpus of ",
              corpus.num_tokens(), " tokens");
  Window w;
  w.begin = begin;
  w.S = S;
  w.S_padded = S_padded;
  w.cu_seqlens.push_back(0);
  for (std::int64_t off : corpus.book_offsets)
    if (off > begin && off < begin + S) w.cu_seqlens.push_back(static_cast<std::int32_t>(off - begin));
  w.cu_seqlens.push_back(static_cast<std::int32_t>(S));
  if (S_padded > S) w.cu_seqlens.push_back(static_cast<std::int32_t>(S_padded));
  w.mask = Mask::document(w.cu_seqlens, /*causal=*/true);
  // A target counts when it exists and lies in the same book as its input (gather_window).
  for (std::int64_t g = begin; g < begin + S; ++g)
    if (g + 1 < corpus.num_tokens() && corpus.book_of(g + 1) == corpus.book_of(g)) ++w.num_targets;
  return w;
}

void gather_window(const Corpus& corpus, const Window& w, const std::vector<std::int64_t>& positions,
                   std::vector<std::int64_t>& inputs, std::vector<std::int64_t>& targets,
                   std::vector<float>& weights) {
  inputs.resize(positions.size());
  targets.resize(positions.size());
  weights.resize(positions.size());
  const std::int64_t N = corpus.num_tokens();
  for (std::size_t i = 0; i < positions.size(); ++i) {
    const std::int64_t p = positions[i];
    if (p >= w.S) {  // padding
      inputs[i] = 0;
      targets[i] = 0;
      weights[i] = 0.0f;
      continue;
    }
    const std::int64_t g = w.begin + p;
    inputs[i] = corpus.tokens[static_cast<std::size_t>(g)];
    const bool has_next = g + 1 < N && corpus.book_of(g + 1) == corpus.book_of(g);
    targets[i] = has_next ? corpus.tokens[static_cast<std::size_t>(g + 1)] : 0;
    weights[i] = has_next ? 1.0f : 0.0f;
  }
}

}  // namespace burst::lm
