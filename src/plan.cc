// Pure planning, part 1: names, sequence layouts, shard/unshard, fingerprints.
// The per-strategy step plans live in plan_steps.cc.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "burst/error.h"
#include "burst/plan.h"

namespace burst {

const char* to_string(LayoutKind kind) noexcept {
  switch (kind) {
    case LayoutKind::Contiguous: return "contiguous";
    case LayoutKind::Zigzag: return "zigzag";
    case LayoutKind::Striped: return "striped";
    case LayoutKind::Balanced: return "balanced";
  }
  return "?";
}

LayoutKind layout_from_string(const std::string& name) {
  for (LayoutKind k : {LayoutKind::Contiguous, LayoutKind::Zigzag, LayoutKind::Striped, LayoutKind::Balanced})
    if (name == to_string(k)) return k;
  BURST_FAIL(InvalidArgument, "unknown layout '", name, "' (valid: contiguous, zigzag, striped, balanced)");
}

const char* to_string(StrategyKind s) noexcept {
  switch (s) {
    case StrategyKind::Burst: return "burst";
    case StrategyKind::Ring: return "ring";
    case StrategyKind::AllGather: return "allgather";
    case StrategyKind::Ulysses: return "ulysses";
    case StrategyKind::Usp: return "usp";
    case StrategyKind::DistFlash: return "distflash";
    case StrategyKind::HeadParallel: return "headpar";
  }
  return "?";
}

const char* to_string(UspRing r) noexcept { return r == UspRing::Burst ? "burst" : "ring"; }

UspRing usp_ring_from_string(const std::string& name) {
  if (name == "ring") return UspRing::Ring;
  if (name == "burst") return UspRing::Burst;
  BURST_FAIL(InvalidArgument, "unknown usp ring '", name, "' (valid: ring, burst)");
}

std::vector<StrategyKind> all_strategies() {
  return {StrategyKind::Burst, StrategyKind::Ring,      StrategyKind::AllGather,   StrategyKind::Ulysses,
          StrategyKind::Usp,   StrategyKind::DistFlash, StrategyKind::HeadParallel};
}

StrategyKind strategy_from_string(const std::string& name) {
  for (StrategyKind s : all_strategies())
    if (name == to_string(s)) return s;
  BURST_FAIL(
      InvalidArgument, "unknown strategy '", name,
      "' (valid: burst, ring, allgather, ulysses, usp, distflash, headpar; tensor parallelism is not a "
      "context-parallel strategy of this library)");
}

namespace {

/// Number of balanced-layout chunks: the largest of 4P, 2P, P dividing S_global.
std::int64_t balanced_chunks(int P, std::int64_t S) {
  for (std::int64_t m : {4, 2, 1})
    if (S % (m * P) == 0) return m * P;
  return 0;
}

std::vector<std::int64_t> iota_range(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(hi - lo));
  std::iota(v.begin(), v.end(), lo);
  return v;
}

/// Balanced: C equal contiguous chunks, C/P per rank, assigned greedily in decreasing order of
/// visible work (longest-processing-time first with a per-rank chunk quota) so that the
/// maximum per-rank work is close to the mean for any mask. Pure and deterministic.
void assign_balanced(SequenceLayout& layout, const ResolvedMask& resolved) {
  const int P = layout.P;
  const std::int64_t S = layout.S_global, C = balanced_chunks(P, S), c = S / C;
  BURST_CHECK(resolved.seq_q() == S && resolved.seq_kv() == S, InvalidArgument,
              "balanced layout of S_global=", S, " under a mask resolved for (", resolved.seq_q(), ", ",
              resolved.seq_kv(), ")");
  const std::vector<std::int64_t> all = iota_range(0, S);
  std::vector<std::int64_t> work(static_cast<std::size_t>(C));
  for (std::int64_t i = 0; i < C; ++i)
    work[static_cast<std::size_t>(i)] = resolved.visible_pairs(iota_range(i * c, (i + 1) * c), all);
  std::vector<std::int64_t> order = iota_range(0, C);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return work[static_cast<std::size_t>(a)] > work[static_cast<std::size_t>(b)];
  });
  std::vector<std::int64_t> load(static_cast<std::size_t>(P), 0), count(static_cast<std::size_t>(P), 0);
  const std::int64_t quota = C / P;
  for (std::int64_t chunk : order) {
    int best = -1;
    for (int r = 0; r < P; ++r) {
      if (count[static_cast<std::size_t>(r)] == quota) continue;
      if (best < 0 || load[static_cast<std::size_t>(r)] < load[static_cast<std::size_t>(best)]) best = r;
    }
    auto& pos = layout.positions[static_cast<std::size_t>(best)];
    for (std::int64_t t = chunk * c; t < (chunk + 1) * c; ++t) pos.push_back(t);
    load[static_cast<std::size_t>(best)] += work[static_cast<std::size_t>(chunk)];
    count[static_cast<std::size_t>(best)] += 1;
  }
  for (auto& pos : layout.positions) std::sort(pos.begin(), pos.end());
}

/// Every layout but balanced's assignment (which needs the mask).
SequenceLayout fixed_layout(LayoutKind kind, int P, std::int64_t S_global) {
  BURST_CHECK(P >= 1, InvalidArgument, "layout needs P >= 1 ranks, got P=", P);
  BURST_CHECK(S_global >= 1, InvalidArgument, "layout needs S_global >= 1, got ", S_global);
  SequenceLayout layout;
  layout.kind = kind;
  layout.P = P;
  layout.S_global = S_global;
  layout.positions.assign(static_cast<std::size_t>(P), {});
  const std::int64_t divisor = (kind == LayoutKind::Zigzag) ? 2LL * P : P;
  BURST_CHECK(S_global % divisor == 0, InvalidArgument, "layout ", to_string(kind),
              " needs S_global=", S_global, " divisible by ", divisor, " (P=", P,
              "); to run another length set DistConfig::pad = true (it pads to padded_length and "
              "masks the padding)");
  const std::int64_t s = S_global / P;
  for (int r = 0; r < P; ++r) {
    auto& pos = layout.positions[static_cast<std::size_t>(r)];
    switch (kind) {
      case LayoutKind::Contiguous: pos = iota_range(r * s, (r + 1) * s); break;
      case LayoutKind::Striped:
        for (std::int64_t t = r; t < S_global; t += P) pos.push_back(t);
        break;
      case LayoutKind::Zigzag: {
        const std::int64_t c = S_global / (2LL * P);
        pos = iota_range(r * c, (r + 1) * c);
        const auto back = iota_range((2LL * P - 1 - r) * c, (2LL * P - r) * c);
        pos.insert(pos.end(), back.begin(), back.end());
        break;
      }
      case LayoutKind::Balanced: break;
    }
  }
  return layout;
}

}  // namespace

SequenceLayout make_layout(LayoutKind kind, int P, std::int64_t S_global, const Mask& mask) {
  SequenceLayout layout = fixed_layout(kind, P, S_global);
  if (kind == LayoutKind::Balanced) assign_balanced(layout, ResolvedMask(mask, S_global, S_global));
  return layout;
}

SequenceLayout make_layout(LayoutKind kind, int P, std::int64_t S_global, const ResolvedMask& mask) {
  SequenceLayout layout = fixed_layout(kind, P, S_global);
  if (kind == LayoutKind::Balanced) assign_balanced(layout, mask);
  return layout;
}

SequenceLayout make_explicit_layout(LayoutKind kind, int P, std::int64_t S_global,
                                    std::vector<std::vector<std::int64_t>> positions) {
  BURST_CHECK(P >= 1 && S_global >= 1, InvalidArgument,
              "explicit layout needs P >= 1 and S_global >= 1, got P=", P, " S_global=", S_global);
  BURST_CHECK(static_cast<int>(positions.size()) == P, InvalidArgument, "explicit layout has ",
              positions.size(), " position lists for P=", P, " ranks");
  for (int r = 1; r < P; ++r)
    BURST_CHECK(positions[static_cast<std::size_t>(r)].size() == positions[0].size(), InvalidArgument,
                "explicit layout: rank ", r, " holds ", positions[static_cast<std::size_t>(r)].size(),
                " tokens, rank 0 holds ", positions[0].size(), " (every rank must hold as many)");
  SequenceLayout layout{kind, P, S_global, std::move(positions)};
  try {
    check_layout(layout);
  } catch (const Error& e) {
    BURST_FAIL(InvalidArgument, "explicit layout over S_global=", S_global, ": ", e.message());
  }
  return layout;
}

std::int64_t padded_length(LayoutKind kind, int P, std::int64_t S_global) {
  BURST_CHECK(P >= 1 && S_global >= 1, InvalidArgument,
              "padded_length needs P >= 1 and S_global >= 1, got P=", P, " S_global=", S_global);
  const std::int64_t multiple = (kind == LayoutKind::Zigzag) ? 2LL * P : P;
  return (S_global + multiple - 1) / multiple * multiple;
}

Mask mask_without_padding(const Mask& mask, std::int64_t S_global) {
  if (!mask.is_shorthand()) return mask;
  // The slice ResolvedMask would expand the shorthand into at (S_global, S_global).
  return Mask::from_slices(
      {MaskSlice{0, S_global, 0, S_global, mask.causal ? SliceKind::Causal : SliceKind::Full,
                 mask.window_left, mask.causal ? -1 : mask.window_right}});
}

void check_layout(const SequenceLayout& layout) {
  BURST_CHECK(static_cast<int>(layout.positions.size()) == layout.P, Internal, "layout has ",
              layout.positions.size(), " position lists for P=", layout.P);
  std::vector<int> owner(static_cast<std::size_t>(layout.S_global), -1);
  for (int r = 0; r < layout.P; ++r) {
    const auto& pos = layout.positions[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < pos.size(); ++i) {
      BURST_CHECK(pos[i] >= 0 && pos[i] < layout.S_global, Internal, "rank ", r, " owns position ", pos[i],
                  " outside [0, ", layout.S_global, ")");
      BURST_CHECK(i == 0 || pos[i] > pos[i - 1], Internal, "rank ", r, " positions not increasing at ", i);
      int& o = owner[static_cast<std::size_t>(pos[i])];
      BURST_CHECK(o < 0, Internal, "position ", pos[i], " owned by ranks ", o, " and ", r);
      o = r;
    }
  }
  for (std::int64_t t = 0; t < layout.S_global; ++t)
    BURST_CHECK(owner[static_cast<std::size_t>(t)] >= 0, Internal, "position ", t, " owned by no rank");
}

std::vector<std::int64_t> layout_work(const SequenceLayout& layout, const ResolvedMask& mask) {
  const std::vector<std::int64_t> all = iota_range(0, layout.S_global);
  std::vector<std::int64_t> work;
  for (const auto& pos : layout.positions) work.push_back(mask.visible_pairs(pos, all));
  return work;
}

namespace {

void check_shard_views(const SequenceLayout& layout, int rank, const TensorView& global,
                       const TensorView& local) {
  BURST_CHECK(rank >= 0 && rank < layout.P, InvalidArgument, "rank ", rank, " outside [0, ", layout.P, ")");
  BURST_CHECK(global.dtype == local.dtype && global.dtype != DType::F64, Unsupported,
              "shard/unshard copy f32, bf16 or f16 between views of one dtype, got ", global.describe(),
              " and ", local.describe());
  BURST_CHECK(global.ndim == 4 && local.ndim == 4, InvalidArgument, "shard/unshard need BSHD views, got ",
              global.describe(), " and ", local.describe());
  const auto& pos = layout.positions[static_cast<std::size_t>(rank)];
  BURST_CHECK(global.size(1) == layout.S_global && local.size(1) == static_cast<std::int64_t>(pos.size()) &&
                  global.size(0) == local.size(0) && global.size(2) == local.size(2) &&
                  global.size(3) == local.size(3) && global.stride[3] == 1 && local.stride[3] == 1,
              InvalidArgument, "shard/unshard shape mismatch: global ", global.describe(),
              " (S_global=", layout.S_global, "), local ", local.describe(), " (S_local=", pos.size(), ")");
}

void copy_rows(const SequenceLayout& layout, int rank, const TensorView& global, const TensorView& local,
               bool to_local) {
  check_shard_views(layout, rank, global, local);
  const auto& pos = layout.positions[static_cast<std::size_t>(rank)];
  const std::int64_t B = global.size(0), H = global.size(2), D = global.size(3);
  const auto e = static_cast<std::int64_t>(dtype_size(global.dtype));  // strides are in elements
  const auto bytes = static_cast<std::size_t>(D * e);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < pos.size(); ++i)
      for (std::int64_t h = 0; h < H; ++h) {
        char* g = static_cast<char*>(global.data) +
                  (b * global.stride[0] + pos[i] * global.stride[1] + h * global.stride[2]) * e;
        char* l =
            static_cast<char*>(local.data) +
            (b * local.stride[0] + static_cast<std::int64_t>(i) * local.stride[1] + h * local.stride[2]) * e;
        if (to_local)
          std::memcpy(l, g, bytes);
        else
          std::memcpy(g, l, bytes);
      }
}

}  // namespace

void shard(const SequenceLayout& layout, int rank, const TensorView& global, const TensorView& local) {
  check_device("shard", kHost, "global", global, "local", local);
  copy_rows(layout, rank, global, local, true);
}

void unshard(const SequenceLayout& layout, int rank, const TensorView& local, const TensorView& global) {
  check_device("unshard", kHost, "local", local, "global", global);
  copy_rows(layout, rank, global, local, false);
}

std::uint64_t fingerprint(const DistConfig& cfg, const ProblemShape& shape, const Mask& mask) {
  std::uint64_t h = mask.fingerprint();
  auto mix = [&h](std::int64_t x) {
    auto u = static_cast<std::uint64_t>(x);
    for (int i = 0; i < 8; ++i) {
      h ^= (u >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<std::int64_t>(cfg.strategy));
  mix(static_cast<std::int64_t>(cfg.layout));
  mix(cfg.ulysses_degree);
  mix(cfg.ranks_per_node);
  mix(cfg.double_ring ? 1 : 0);
  mix(static_cast<std::int64_t>(cfg.usp_ring));
  mix(static_cast<std::int64_t>(cfg.backward_side));
  mix(cfg.overlap ? 1 : 0);
  if (!cfg.return_overlap) mix(200);  // default configurations keep their fingerprint
  mix(cfg.mask_aware ? 1 : 0);
  // Mixed only when set, so fingerprints of the fp32-partials default stay as they were.
  if (cfg.partials_dtype != DType::F32) mix(100 + static_cast<std::int64_t>(cfg.partials_dtype));
  mix(static_cast<std::int64_t>(cfg.kernel));
  mix(cfg.saved_contexts);
  mix(cfg.softmax_scale.has_value() ? 1 : 0);
  if (cfg.softmax_scale) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &*cfg.softmax_scale, sizeof bits);
    mix(bits);
  }
  for (std::int64_t x : {shape.B, shape.S_global, shape.H, shape.H_kv, shape.D}) mix(x);
  mix(static_cast<std::int64_t>(shape.dtype));
  mix(cfg.pad ? 1 : 0);
  mix(static_cast<std::int64_t>(cfg.positions.size()));
  for (const auto& pos : cfg.positions) {
    mix(static_cast<std::int64_t>(pos.size()));
    for (std::int64_t x : pos) mix(x);
  }
  return h;
}

}  // namespace burst
