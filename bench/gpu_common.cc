// The build-independent half of bench/gpu.h: --device parsing and the launcher's local rank.
#include <cstdlib>
#include <functional>
#include <string>

#include "bench/gpu.h"
#include "burst/error.h"

namespace burst::bench {

int parse_bench_device(const std::string& name) {
  if (name == "cpu" || name == "host") return -2;
  if (name == "cuda") return -1;
  const std::string prefix = "cuda:";
  if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
    const std::string digits = name.substr(prefix.size());
    if (digits.size() <= 4 && digits.find_first_not_of("0123456789") == std::string::npos)
      return std::stoi(digits);
  }
  BURST_FAIL(InvalidArgument, "--device '", name, "': expected cpu, cuda (each rank: local rank modulo ",
             "the GPU count) or cuda:N");
}

int gpu_for_local_rank(int local_rank, int count) {
  BURST_CHECK(count >= 1, Unsupported, "no CUDA GPU to choose from (", count, " visible)");
  BURST_CHECK(local_rank >= 0, InvalidArgument, "local rank ", local_rank, " is negative");
  return local_rank % count;
}

int launcher_local_rank(const std::function<const char*(const char*)>& lookup) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* v = lookup(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r < (1 << 20)) return static_cast<int>(r);
  }
  return 0;
}

}  // namespace burst::bench
