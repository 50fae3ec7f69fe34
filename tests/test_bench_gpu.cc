// The GPU benchmarks' rank-to-GPU rule and --device parsing (bench/gpu.h), which run anywhere:
// each rank takes the GPU of its local rank modulo the GPU count, the local rank read from the
// launcher's environment (Open MPI first, then Hydra, then Slurm; 0 when none says).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "bench/gpu.h"
#include "burst/error.h"

namespace burst::bench {
namespace {

TEST(BenchGpu, LocalRankModuloTheGpuCount) {
  EXPECT_EQ(gpu_for_local_rank(0, 1), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 1), 0);  // four ranks sharing one GPU
  EXPECT_EQ(gpu_for_local_rank(3, 8), 3);
  EXPECT_EQ(gpu_for_local_rank(9, 8), 1);
  EXPECT_THROW(gpu_for_local_rank(0, 0), Error);
  EXPECT_THROW(gpu_for_local_rank(-1, 2), Error);
}

TEST(BenchGpu, LocalRankFromTheLaunchersEnvironment) {
  auto from = [](std::map<std::string, std::string> env) {
    return launcher_local_rank([env](const char* name) -> const char* {
      const auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  EXPECT_EQ(from({}), 0);
  EXPECT_EQ(from({{"SLURM_LOCALID", "5"}}), 5);
  EXPECT_EQ(from({{"MPI_LOCALRANKID", "2"}, {"SLURM_LOCALID", "5"}}), 2);
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"MPI_LOCALRANKID", "2"}}), 3);
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}, {"SLURM_LOCALID", "4"}}), 4);  // not a number
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_LOCAL_RANK", ""}}), 0);
}

TEST(BenchGpu, DeviceNames) {
  EXPECT_EQ(parse_bench_device("cpu"), -2);
  EXPECT_EQ(parse_bench_device("host"), -2);
  EXPECT_EQ(parse_bench_device("cuda"), -1);
  EXPECT_EQ(parse_bench_device("cuda:3"), 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:12345"})
    EXPECT_THROW(parse_bench_device(bad), Error) << bad;
}

}  // namespace
}  // namespace burst::bench
