// examples/dist_attention.cc — context-parallel attention from C++ over MPI_COMM_WORLD.
//
// Every rank draws the same global Q, K, V, dO [B, S, H, D] from one seed, keeps the tokens its
// layout gives it (DistAttention::positions()), and runs burst's distributed forward and
// backward on those shards. Each rank then checks its shard of out, lse, dQ, dK, dV against a
// single-process call on the whole sequence (the fp64 Reference kernel). Exit code 0 only when
// every rank agrees within 1e-5 of the largest reference value.
//
//   mpirun -n 2 build/examples/dist_attention [strategy] [layout]      (ctest example_dist_attention_np2)
#include <mpi.h>

#include <burst/burst.h>
#include <burst/comm_interop.h>
#include <burst/splitmix64.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// Rows `pos` (global token indices) of a [B, S, heads, D] tensor: this rank's shard.
burst::Tensor take_rows(const burst::Tensor& global, const std::vector<std::int64_t>& pos) {
  const std::int64_t B = global.shape()[0], S = global.shape()[1];
  const std::int64_t row = global.shape()[2] * global.shape()[3];
  burst::Tensor local({B, static_cast<std::int64_t>(pos.size()), global.shape()[2], global.shape()[3]});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < pos.size(); ++i)
      std::copy_n(
          global.data() + (b * S + pos[i]) * row, row,
          local.data() + (b * static_cast<std::int64_t>(pos.size()) + static_cast<std::int64_t>(i)) * row);
  return local;
}

// max |local - reference rows| / max |reference| over this rank's rows; lse rows are [B, H, S].
double rel_err(const burst::Tensor& local, const burst::Tensor& ref, const std::vector<std::int64_t>& pos,
               bool lse_layout) {
  const auto& g = ref.shape();
  double worst = 0, scale = 0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) scale = std::max(scale, std::fabs(double(ref.data()[i])));
  const std::int64_t n = static_cast<std::int64_t>(pos.size());
  const std::int64_t outer = lse_layout ? g[0] * g[1] : g[0], inner = lse_layout ? 1 : g[2] * g[3];
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t e = 0; e < inner; ++e) {
        const double got = local.data()[(o * n + i) * inner + e];
        const double want =
            ref.data()[(o * g[lse_layout ? 2 : 1] + pos[static_cast<std::size_t>(i)]) * inner + e];
        worst = std::max(worst, std::fabs(got - want));
      }
  return worst / std::max(scale, 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, failed = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    const std::int64_t B = 1, S = 512, H = 8, H_kv = 2, D = 64;  // GQA 8:2
    burst::Tensor q({B, S, H, D}), k({B, S, H_kv, D}), v({B, S, H_kv, D}), dout({B, S, H, D});
    burst::SplitMix64 rng(2024);  // the same global tensors on every rank
    for (burst::Tensor* t : {&q, &k, &v, &dout})
      for (std::int64_t i = 0; i < t->numel(); ++i) t->data()[i] = static_cast<float>(2 * rng.uniform() - 1);

    // [readme-distributed]
    burst::Communicator comm = burst::from_mpi(MPI_COMM_WORLD);  // an MPI_Comm_dup; collective
    burst::DistConfig cfg;
    cfg.strategy = burst::StrategyKind::Burst;
    cfg.layout = burst::LayoutKind::Zigzag;
    const burst::ProblemShape shape{B, S, H, H_kv, D};  // global S
    burst::DistAttention attn(comm, cfg, shape, burst::Mask::causal_mask());
    const std::vector<std::int64_t>& pos = attn.positions();  // this rank's global token ids
    burst::Tensor ql = take_rows(q, pos), kl = take_rows(k, pos), vl = take_rows(v, pos);
    burst::Tensor out({B, attn.local_length(), H, D}), lse({B, H, attn.local_length()});
    attn.forward(ql.view(), kl.view(), vl.view(), out.view(), lse.view());
    burst::Tensor dq({B, attn.local_length(), H, D}), dk({B, attn.local_length(), H_kv, D}),
        dv({B, attn.local_length(), H_kv, D});
    burst::Tensor doutl = take_rows(dout, pos);
    attn.backward(doutl.view(), ql.view(), kl.view(), vl.view(), out.view(), lse.view(), dq.view(), dk.view(),
                  dv.view());
    // [/readme-distributed]

    // The single-process call on the whole sequence, by the fp64 oracle.
    burst::AttentionParams p;
    p.mask = burst::Mask::causal_mask();
    p.impl = burst::KernelImpl::Reference;
    const burst::AttentionOutput ref = burst::attention_forward(q.view(), k.view(), v.view(), p);
    const burst::AttentionGrads grad = burst::attention_backward(dout.view(), q.view(), k.view(), v.view(),
                                                                 ref.out.view(), ref.lse.view(), p);
    const double errs[] = {rel_err(out, ref.out, pos, false), rel_err(lse, ref.lse, pos, true),
                           rel_err(dq, grad.dq, pos, false), rel_err(dk, grad.dk, pos, false),
                           rel_err(dv, grad.dv, pos, false)};
    // fp32 tiles against fp64: ~1e-6 relative at this size; 1e-5 leaves room, a wrong token fails.
    const double worst = *std::max_element(std::begin(errs), std::end(errs));
    failed = worst > 1e-5 ? 1 : 0;
    std::printf(
        "rank %d: %lld tokens, max rel err out %.2e lse %.2e dq %.2e dk %.2e dv %.2e, %lld bytes sent%s\n",
        rank, static_cast<long long>(pos.size()), errs[0], errs[1], errs[2], errs[3], errs[4],
        static_cast<long long>(attn.last_stats().bytes_sent), failed ? "  FAILED" : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    failed = 1;
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
