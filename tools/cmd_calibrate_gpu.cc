// `burst calibrate --device cuda` — the cost model's GPU: the step kernels' forward and backward
// rates on this host's GPU (bench/gpu.h: bf16, causal, B 1, CUDA events), written into a cluster
// spec whose other figures (links, matmul peak) come from a preset named by --cluster (vendor
// data sheets, share/clusters/): attention_efficiency_forward / _backward = the measured rate ÷
// the preset's matmul_flops, memory_capacity = the GPU's own. One process, one GPU; the links of
// a multi-GPU node are not measured here (one GPU cannot show them).
#include <sstream>
#include <string>

#include "bench/cluster_spec_io.h"
#include "bench/gpu.h"
#include "bench/harness.h"
#include "burst/cost_model.h"
#include "burst/error.h"
#include "commands.h"

namespace burst::cli {

void run_calibrate_gpu(const GpuCalibrateOptions& o) {
  const int device = bench::parse_bench_device(o.device);
  BURST_CHECK(device != -2, InvalidArgument, "calibrate: --device ", o.device, " is not a GPU");
  ClusterSpec c = bench::load_cluster(o.cluster);  // checked before any GPU work
  const nlohmann::json m = bench::calibrate_gpu(device, o.seq, o.heads, o.head_dim, o.repeats);
  const double fwd = m.at("forward_flops").get<double>(), bwd = m.at("backward_flops").get<double>();
  c.name = o.name;
  c.attention_efficiency_forward = fwd / c.matmul_flops;
  c.attention_efficiency_backward = bwd / c.matmul_flops;
  c.memory_capacity = static_cast<double>(m.at("memory_bytes").get<std::int64_t>());
  std::ostringstream src;
  src << "burst calibrate --device cuda on " << m.at("gpu_name").get<std::string>() << " ("
      << m.at("device").get<std::string>() << "): step kernels bf16 causal B=1 S=" << o.seq
      << " H=" << o.heads << " D=" << o.head_dim << " (median of " << o.repeats << ", CUDA events): forward "
      << fwd / 1e12 << " TFLOP/s, backward " << bwd / 1e12 << " TFLOP/s = " << c.attention_efficiency_forward
      << " / " << c.attention_efficiency_backward << " of the preset's matmul_flops " << c.matmul_flops / 1e12
      << " TFLOP/s; links, matmul peak and the rest from the preset " << o.cluster << " (not measured)";
  c.source = src.str();
  c.validate();
  print_cluster_spec(c, o.output);
}

}  // namespace burst::cli
