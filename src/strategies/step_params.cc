// Step parameters (see step_params.h).
#include "strategies/step_params.h"

#include <omp.h>

#include <algorithm>

#include "burst/dispatch.h"
#include "strategies/step_tables.h"

namespace burst::strategies {

const std::vector<std::int64_t>& rank_positions(const Setup& setup, int rank) {
  return setup.plan->layout().positions[static_cast<std::size_t>(rank)];
}

std::int64_t block_pairs(const Setup& setup, int q_rank, int kv_rank) {
  return setup.plan->block_pairs()[static_cast<std::size_t>(q_rank)][static_cast<std::size_t>(kv_rank)];
}

kernels::KernelParams step_params(const Setup& setup, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                                  const std::function<void()>* progress) {
  kernels::KernelParams p;
  p.mask = setup.resolved.get();
  p.mask_slices = setup.resolved->slices().data();
  p.mask_slice_count = static_cast<std::int64_t>(setup.resolved->slices().size());
  p.q_pos = q_pos;
  p.kv_pos = kv_pos;
  p.host_q_pos = q_pos;  // the host arrays; the device twins below (kernels.h: KernelArgs::host_*)
  p.host_kv_pos = kv_pos;
  p.host_mask_slices = setup.resolved->slices().data();
  if (setup.tables) {  // a GPU: the tables uploaded once (step_tables.h)
    p.mask_slices = setup.tables->slices();
    p.q_pos = setup.tables->positions(q_pos);
    p.kv_pos = setup.tables->positions(kv_pos);
  }
  p.scale = setup.softmax_scale;
  p.num_threads = setup.cfg.num_threads > 0 ? setup.cfg.num_threads : std::max(1, omp_get_max_threads());
  p.impl = setup.cfg.kernel;
  // One resolution per DistAttention pass set-up; both passes follow the same rule today
  // (burst/dispatch.h), so the forward's key stands for both.
  p.isa = resolve_isa(setup.cfg.isa, setup.shape.dtype, KernelPass::Forward);
  if (setup.cfg.overlap) p.progress = progress;  // the caller's hook outlives its steps
  return p;
}

}  // namespace burst::strategies
