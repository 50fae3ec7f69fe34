// `burst bench dist --timeline` (bench_timeline.h): records travel to rank 0 as fixed-size
// groups of 64-bit words (doubles as their bit patterns; all_gather_v moves bytes: exact).
#include "bench/bench_timeline.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "burst/error.h"

namespace burst::bench {

namespace {

constexpr std::int64_t kWords = 12;  // 64-bit words per record

std::int64_t bits_of(double x) {
  std::int64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

double double_of(std::int64_t b) {
  double x = 0;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

}  // namespace

void TimelineCollector::check_path(const Communicator& comm, const std::string& path) {
  comm.agree_on([&] {
    if (comm.rank() != 0) return;
    std::ofstream out(path);
    BURST_CHECK(out.good(), InvalidArgument, "--timeline: cannot write '", path, "'");
  });
}

void TimelineCollector::add_pass(Timeline& timeline, const char* pass, int rank, int repeat,
                                 const DistStats& stats) {
  std::vector<StepRecord> got = timeline.records();
  timeline.clear();
  if (got.empty()) {
    StepRecord r;
    r.pass = pass;
    r.rank = rank;
    r.whole_pass = true;
    r.compute_seconds = stats.compute_seconds;
    r.compute_cpu_seconds = -1;
    r.wait_seconds = stats.exposed_comm_seconds;
    r.bytes_sent = stats.bytes_sent;
    r.bytes_received = -1;
    got.push_back(std::move(r));
  }
  for (StepRecord& r : got) {
    records_.push_back(std::move(r));
    passes_.push_back({repeat, stats.seconds});
  }
}

void TimelineCollector::write(const Communicator& comm, const nlohmann::json& config, const std::string& path,
                              const std::vector<double>* rank_fma) const {
  std::vector<std::int64_t> words;
  for (std::size_t i = 0; i < records_.size(); ++i) {
    const StepRecord& r = records_[i];
    const std::int64_t w[kWords] = {r.rank,
                                    r.pass == "bwd" ? 1 : 0,
                                    r.step,
                                    r.whole_pass ? 1 : 0,
                                    passes_[i].repeat,
                                    bits_of(passes_[i].pass_seconds),
                                    bits_of(r.compute_seconds),
                                    bits_of(r.compute_cpu_seconds),
                                    bits_of(r.wait_seconds),
                                    bits_of(r.copy_seconds),
                                    r.bytes_sent,
                                    r.bytes_received};
    words.insert(words.end(), w, w + kWords);
  }
  const int P = comm.size();
  // Record counts per rank (one int64 each), then every rank's records (kWords int64 each).
  const auto mine = static_cast<std::int64_t>(records_.size());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(P)), bytes;
  comm.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(counts)));
  std::int64_t total = 0;
  for (const std::int64_t c : counts) {
    bytes.push_back(c * kWords * static_cast<std::int64_t>(sizeof(std::int64_t)));
    total += c * kWords;
  }
  std::vector<std::int64_t> w(static_cast<std::size_t>(total));
  comm.all_gather_v(std::as_bytes(std::span(words)), bytes, std::as_writable_bytes(std::span(w)));
  if (comm.rank() != 0) return;
  std::ofstream out(path);
  BURST_CHECK(out.good(), InvalidArgument, "--timeline: cannot write '", path, "'");
  for (std::size_t i = 0; i + kWords <= w.size(); i += kWords) {
    const std::int64_t* x = w.data() + i;
    nlohmann::json j = config;
    j["bench"] = "timeline";
    j["rank"] = x[0];
    j["pass"] = x[1] ? "bwd" : "fwd";
    j["step"] = x[2];
    j["whole_pass"] = x[3] != 0;
    j["repeat"] = x[4];
    j["pass_seconds"] = double_of(x[5]);
    j["compute_seconds"] = double_of(x[6]);
    const double cpu = double_of(x[7]);
    j["compute_cpu_seconds"] = cpu < 0 ? nlohmann::json(nullptr) : nlohmann::json(cpu);
    j["wait_seconds"] = double_of(x[8]);
    j["copy_seconds"] = double_of(x[9]);
    j["bytes_sent"] = x[10];
    j["bytes_received"] = x[11] < 0 ? nlohmann::json(nullptr) : nlohmann::json(x[11]);
    if (rank_fma != nullptr && x[0] >= 0 && static_cast<std::size_t>(x[0]) < rank_fma->size())
      j["fma_all_busy_gflops_rank"] = (*rank_fma)[static_cast<std::size_t>(x[0])];
    out << j.dump() << "\n";
  }
  BURST_CHECK(out.good(), InvalidArgument, "--timeline: writing '", path, "' failed");
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2 < line.size() ? colon + 2 : line.size());
    }
  return "unknown";
}

}  // namespace burst::bench
