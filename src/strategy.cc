// The DistAttention façade: agreement, validation, planning and dispatch to one strategy file
// (src/strategies/strategy_impl.h). Order in the constructor, all before any payload moves:
//   1. every rank's (cfg, shape, mask) fingerprint agreed (Communicator::agree);
//   2. local validation (shape values, mask resolution, layout divisibility, the strategy's own
//      validate_*) run on every rank, verdict agreed (Communicator::agree_on);
//   3. node topology (burst / usp ring=burst double ring), the pure plan, then the strategy executor.
// Each pass re-validates the local tensors the same way (their shapes may differ per rank), then
// runs the strategy under run_pass (abort-on-failure once payload may be in flight) and times it.
#include <chrono>
#include <cmath>
#include <string>

#include "bshd_check.h"
#include "burst/error.h"
#include "burst/strategy.h"
#include "plan_strategies.h"
#include "strategies/step_tables.h"
#include "strategies/strategy_impl.h"
#include "strategy_device.h"

namespace burst {

namespace {

struct Entry {
  strategies::ValidateFn validate;
  strategies::MakeFn make;
};

Entry entry_of(StrategyKind s) {
  using namespace strategies;
  switch (s) {
    case StrategyKind::Burst: return {validate_burst, make_burst};
    case StrategyKind::Ring: return {validate_ring, make_ring};
    case StrategyKind::AllGather: return {validate_allgather, make_allgather};
    case StrategyKind::Ulysses: return {validate_ulysses, make_ulysses};
    case StrategyKind::Usp: return {validate_usp, make_usp};
    case StrategyKind::DistFlash: return {validate_distflash, make_distflash};
    case StrategyKind::HeadParallel: return {validate_headpar, make_headpar};
  }
  BURST_FAIL(Internal, "unknown strategy ", static_cast<int>(s));
}

void validate_common(const DistConfig& cfg, const ProblemShape& s, const Mask& mask, int P) {
  BURST_CHECK(s.B >= 1 && s.S_global >= 1 && s.H >= 1 && s.H_kv >= 1 && s.D >= 1, InvalidArgument,
              "problem shape B=", s.B, " S_global=", s.S_global, " H=", s.H, " H_kv=", s.H_kv, " D=", s.D,
              " must be positive");
  BURST_CHECK(s.H % s.H_kv == 0, InvalidArgument, "H=", s.H, " not divisible by H_kv=", s.H_kv);
  BURST_CHECK(s.dtype == DType::F32 || s.dtype == DType::BF16 || s.dtype == DType::F16, Unsupported,
              "ProblemShape::dtype ", to_string(s.dtype), " is not computed; use f32, bf16 or f16");
  BURST_CHECK(s.D <= 256, Unsupported, "head dim D=", s.D, " exceeds the kernels' limit 256");
  BURST_CHECK(cfg.num_threads >= 0, InvalidArgument, "num_threads=", cfg.num_threads, " must be >= 0");
  BURST_CHECK(isa_available(cfg.isa), Unsupported, "isa=", to_string(cfg.isa),
              " requested but this rank's CPU supports at most ", to_string(detect_isa()),
              cfg.isa == Isa::Amx ? " (AMX absent or refused)" : "");
  BURST_CHECK(cfg.saved_contexts >= 0, InvalidArgument, "saved_contexts=", cfg.saved_contexts,
              " must be >= 0");
  BURST_CHECK(cfg.ranks_per_node >= 0, InvalidArgument, "ranks_per_node=", cfg.ranks_per_node,
              " must be >= 0");
  BURST_CHECK(std::isfinite(cfg.comm_timeout_seconds) && cfg.comm_timeout_seconds >= 0, InvalidArgument,
              "comm_timeout_seconds=", cfg.comm_timeout_seconds,
              " must be finite and >= 0 (0: wait forever)");
  if (cfg.softmax_scale)
    BURST_CHECK(std::isfinite(*cfg.softmax_scale) && *cfg.softmax_scale > 0, InvalidArgument,
                "softmax_scale=", *cfg.softmax_scale, " must be finite and > 0");
  BURST_CHECK(cfg.partials_dtype == DType::F32 || cfg.partials_dtype == DType::BF16, Unsupported,
              "partials_dtype ", to_string(cfg.partials_dtype), " is not supported; use f32 or bf16");
  BURST_CHECK(cfg.partials_dtype == DType::F32 || cfg.strategy == StrategyKind::Burst ||
                  cfg.strategy == StrategyKind::Ring,
              Unsupported, "partials_dtype bf16 (16-bit write-ring partials) runs with burst or ring, not ",
              to_string(cfg.strategy), "; its partials travel in fp32");
  ResolvedMask::validate(mask, s.S_global, s.S_global);  // invalid slices; resolved once, in setup
  if (!cfg.positions.empty()) {
    BURST_CHECK(cfg.strategy == StrategyKind::Burst || cfg.strategy == StrategyKind::Ring ||
                    cfg.strategy == StrategyKind::AllGather,
                Unsupported, "an explicit layout (positions) runs with burst, ring or allgather, not ",
                to_string(cfg.strategy), " (its schedule follows the layout kind)");
    BURST_CHECK(!cfg.pad, InvalidArgument, "an explicit layout (positions) cannot be combined with pad");
    (void)make_explicit_layout(cfg.layout, P, s.S_global, cfg.positions);
  }
}

// The problem the plan and strategy run: with cfg.pad, the sequence padded to the layout's
// multiple and the mask confined to the real tokens (plan.h).
ProblemShape run_shape(const DistConfig& cfg, const ProblemShape& s, int P) {
  ProblemShape r = s;
  if (cfg.pad && s.S_global >= 1) r.S_global = padded_length(cfg.layout, P, s.S_global);
  return r;
}

void validate_run(const DistConfig& cfg, const ProblemShape& s, const ResolvedMask& mask, int P) {
  // Layout divisibility (zigzag needs 2P, the others P): fails here with the layout's message.
  if (cfg.positions.empty()) (void)make_layout(cfg.layout, P, s.S_global, Mask{});
  entry_of(cfg.strategy).validate(cfg, s, mask, P);
}

// Inputs (q, k, v, dout) must have the problem's dtype; results (out, dq, dk, dv) and the saved
// out may also be f32.
enum class Role { Input, Result };

/// A local operand: the problem's dtype (results may be f32), then the shared shape check.
void check_operand(const TensorView& t, const char* name, std::int64_t B, std::int64_t S, std::int64_t H,
                   std::int64_t D, DType dtype, Role role) {
  BURST_CHECK(t.data != nullptr, InvalidArgument, name, " is null");
  BURST_CHECK(t.dtype == dtype || (role == Role::Result && t.dtype == DType::F32), InvalidArgument, name,
              " has dtype ", to_string(t.dtype), " but the problem's dtype (ProblemShape::dtype) is ",
              to_string(dtype),
              role == Role::Result ? " (results may also be f32)" : "; q, k, v and dout must all have it");
  check_bshd(t, name, B, S, H, D);
}

// Non-finite inputs are refused (check_finite_bshd): one read of the operand on its device,
// B·S·H·D elements against the pass's O(S²) work. `positions`: this rank's global positions.
void check_finite(const device::Device& dev, const TensorView& t, const char* name,
                  const std::vector<std::int64_t>& positions) {
  check_finite_bshd(dev, t, name, [&](std::int64_t, std::int64_t i) {
    return "global position " + std::to_string(positions[static_cast<std::size_t>(i)]);
  });
}

// After the fingerprint agreement failed (on every rank): which arguments differ, with every
// rank's value, from an all-gather of each rank's "name=value" lines. Every rank sees every
// rank's lines, so every rank throws the same message.
std::uint64_t positions_hash(const std::vector<std::vector<std::int64_t>>& positions) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& pos : positions) {
    h = (h ^ pos.size()) * 1099511628211ull;
    for (const std::int64_t x : pos) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ull;
  }
  return h;
}

[[noreturn]] void throw_differing_arguments(const Communicator& c, const DistConfig& cfg,
                                            const ProblemShape& shape, const Mask& mask) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"strategy", to_string(cfg.strategy)},
      {"layout", to_string(cfg.layout)},
      {"mask", mask.describe()},
      {"softmax_scale", cfg.softmax_scale ? std::to_string(*cfg.softmax_scale) : "default"},
      {"B", std::to_string(shape.B)},
      {"S_global", std::to_string(shape.S_global)},
      {"H", std::to_string(shape.H)},
      {"H_kv", std::to_string(shape.H_kv)},
      {"D", std::to_string(shape.D)},
      {"dtype", to_string(shape.dtype)},
      {"pad", cfg.pad ? "true" : "false"},
      {"kernel", to_string(cfg.kernel)},
      {"ulysses_degree", std::to_string(cfg.ulysses_degree)},
      {"usp_ring", to_string(cfg.usp_ring)},
      {"ranks_per_node", std::to_string(cfg.ranks_per_node)},
      {"double_ring / overlap / return_overlap / mask_aware",
       std::to_string(cfg.double_ring) + std::to_string(cfg.overlap) + std::to_string(cfg.return_overlap) +
           std::to_string(cfg.mask_aware)},
      {"backward_side", std::to_string(static_cast<int>(cfg.backward_side))},
      {"partials_dtype", to_string(cfg.partials_dtype)},
      {"saved_contexts", std::to_string(cfg.saved_contexts)},
      {"positions (explicit layout)", std::to_string(positions_hash(cfg.positions))}};
  std::string mine;
  for (const auto& [k, v] : fields) mine += v + '\n';
  const auto all = c.all_gather_bytes(mine, "DistAttention: which arguments differ");
  std::vector<std::vector<std::string>> values(all.size());
  for (std::size_t r = 0; r < all.size(); ++r)
    for (std::size_t a = 0, b; (b = all[r].find('\n', a)) != std::string::npos; a = b + 1)
      values[r].push_back(all[r].substr(a, b - a));
  std::string diff;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    bool same = true;
    for (const auto& v : values) same = same && v.size() == fields.size() && v[f] == values[0][f];
    if (same) continue;
    diff += (diff.empty() ? "" : "; ") + fields[f].first + ":";
    for (std::size_t r = 0; r < values.size(); ++r)
      diff += std::string(r ? "," : "") + " rank " + std::to_string(r) + " '" +
              (f < values[r].size() ? values[r][f] : "?") + "'";
  }
  BURST_FAIL(InvalidArgument, "DistAttention arguments differ between ranks (",
             diff.empty() ? "config" : diff,
             "); every rank must pass identical arguments: the construction (and attn_func) is collective");
}

void check_rows(const TensorView& t, const char* name, std::int64_t B, std::int64_t H, std::int64_t S) {
  BURST_CHECK(t.data != nullptr, InvalidArgument, name, " is null");
  BURST_CHECK(t.dtype == DType::F32 && t.ndim == 3 && t.size(0) == B && t.size(1) == H && t.size(2) == S &&
                  t.is_contiguous(),
              InvalidArgument, name, " is ", t.describe(), ", expected contiguous f32 [", B, ",", H, ",", S,
              "]");
}

// An uninitialised contiguous fp32 tensor of `shape` in the device's memory, held by `store`.
TensorView f32_buffer(const device::Device& dev, const std::vector<std::int64_t>& shape,
                      device::Buffer& store, const Device& runs_on) {
  std::int64_t n = 1;
  for (const std::int64_t x : shape) n *= x;
  store = dev.allocate(n * 4, device::MemoryKind::Device);
  TensorView v = make_view(static_cast<const void*>(store.data()), DType::F32, shape);
  v.device = runs_on;
  return v;
}

// The fp32 stand-in of a 16-bit result for one pass (strategies compute and merge in fp32): an
// uninitialised buffer on the device, rounded into the caller's tensor by finish().
TensorView as_f32(const device::Device& dev, const TensorView& t, device::Buffer& store,
                  const Device& runs_on) {
  if (t.dtype == DType::F32) return t;
  return f32_buffer(dev, std::vector<std::int64_t>(t.shape.begin(), t.shape.begin() + t.ndim), store,
                    runs_on);
}

// Rounds an fp32 stand-in into the caller's 16-bit result once, at the end of the pass (on the
// device: round to nearest even, as burst/tensor.h's convert).
void finish(const device::Device& dev, const TensorView& t, const TensorView& f32) {
  if (t.dtype != DType::F32) dev.convert(f32, t);
}

/// ulysses and usp return lse only when asked (an empty lse ships nothing) and can run their
/// backward without it from a saved context.
bool lse_optional(StrategyKind s) { return s == StrategyKind::Ulysses || s == StrategyKind::Usp; }

}  // namespace

struct DistAttention::Impl {
  Communicator comm;
  DistConfig cfg;
  ProblemShape shape;
  std::shared_ptr<const Plan> plan;
  /// The mask resolved once over (S_global, S_global): every kernel step of the strategy points
  /// at it (kernels/step.h), so it outlives the strategy (declared before it).
  std::shared_ptr<const ResolvedMask> resolved;
  /// The device of every pass (the CPU for the host constructor); runs_on is its burst::Device.
  std::shared_ptr<const device::Device> device;
  /// The kernels' tables in the device's memory (null on the CPU): every step's parameters point
  /// into them — the peer strategies keep no Setup — so they outlive the strategy (declared
  /// before it, after the device whose memory they hold).
  std::shared_ptr<const strategies::StepTables> tables;
  std::unique_ptr<strategies::Strategy> strategy;
  DistStats stats;
  std::int64_t S_local = 0;
  Device runs_on = kHost;
  explicit Impl(Communicator c) : comm(std::move(c)) {}
};

DistAttention::DistAttention(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape,
                             const Mask& mask)
    : DistAttention(comm, cfg, shape, mask, OnDevice{device::make_cpu_device(), kHost}) {}

DistAttention::DistAttention(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape,
                             const Mask& mask, const OnDevice& on) {
  // Every collective of the set-up runs under cfg's timeout (a rank that never arrives ends the
  // job within it): the split's roll call on the caller's communicator too, whose setting is
  // restored afterwards. An invalid value keeps the caller's until the agreed verdict refuses it.
  const bool timeout_ok = std::isfinite(cfg.comm_timeout_seconds) && cfg.comm_timeout_seconds >= 0;
  const std::string activity = std::string("DistAttention set-up (strategy ") + to_string(cfg.strategy) + ")";
  {
    const double caller_timeout = comm.timeout();
    const std::string caller_activity = comm.activity();
    if (timeout_ok) comm.set_timeout(cfg.comm_timeout_seconds);
    comm.set_activity(activity);
    const auto restore = [&] {
      comm.set_timeout(caller_timeout);
      comm.set_activity(caller_activity);
    };
    try {
      // A private communicator with its own counters (split keeps rank order). Collective.
      impl_ = std::make_unique<Impl>(comm.split(0, comm.rank()));
    } catch (...) {
      restore();
      throw;
    }
    restore();
  }
  const Communicator& c = impl_->comm;
  if (timeout_ok) c.set_timeout(cfg.comm_timeout_seconds);
  c.set_activity(activity);
  const int P = c.size();
  try {
    c.agree(fingerprint(cfg, shape, mask), "DistAttention arguments (config, shape or mask)");
  } catch (const Error&) {
    throw_differing_arguments(c, cfg, shape, mask);  // every rank is here: the agreement failed everywhere
  }
  const ProblemShape run = run_shape(cfg, shape, P);
  const Mask run_mask = cfg.pad ? mask_without_padding(mask, shape.S_global) : mask;
  // The one resolution of the mask (over the run's S_global): the plan, the strategy plan and
  // every kernel step of every pass use this object.
  std::shared_ptr<const ResolvedMask> resolved;
  c.agree_on([&] {
    BURST_CHECK(on.device != nullptr, InvalidArgument, "DistAttention: OnDevice holds no device");
    validate_common(cfg, shape, mask, P);
    resolved = std::make_shared<const ResolvedMask>(run_mask, run.S_global, run.S_global);
    validate_run(cfg, run, *resolved, P);
  });
  c.learn_nodes();  // DistStats split bytes into intra- and inter-node (channels share the map)
  NodeTopology topo{1, P, 0, c.rank()};
  if (strategies::uses_node_topology(cfg)) topo = c.node_topology(cfg.ranks_per_node);
  std::shared_ptr<const Plan> plan;
  c.agree_on(
      [&] { plan = std::make_shared<const Plan>(Plan::make(cfg, run, *resolved, P, topo.ranks_per_node)); });
  impl_->resolved = resolved;
  strategies::Setup setup{c,
                          cfg,
                          run,
                          impl_->resolved,
                          plan,
                          c.rank(),
                          P,
                          topo,
                          cfg.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(shape.D))),
                          on.device};
  // The kernels' index tables in the device's memory, once (nothing on the CPU).
  if (!on.device->host_memory())
    setup.tables = std::make_shared<const strategies::StepTables>(*on.device, *plan, *resolved);
  impl_->device = on.device;
  impl_->tables = setup.tables;
  impl_->runs_on = on.runs_on;
  impl_->cfg = cfg;
  impl_->shape = run;
  impl_->plan = plan;
  impl_->S_local =
      static_cast<std::int64_t>(plan->layout().positions[static_cast<std::size_t>(c.rank())].size());
  impl_->strategy = entry_of(cfg.strategy).make(setup);
}

DistAttention::~DistAttention() = default;
DistAttention::DistAttention(DistAttention&&) noexcept = default;
DistAttention& DistAttention::operator=(DistAttention&&) noexcept = default;

const Plan& DistAttention::plan() const { return *impl_->plan; }
const DistConfig& DistAttention::config() const { return impl_->cfg; }
const std::vector<std::int64_t>& DistAttention::positions() const {
  return impl_->plan->layout().positions[static_cast<std::size_t>(impl_->comm.rank())];
}
std::int64_t DistAttention::local_length() const { return impl_->S_local; }
const DistStats& DistAttention::last_stats() const { return impl_->stats; }

void DistAttention::forward(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const TensorView& lse) {
  Impl& m = *impl_;
  const ProblemShape& s = m.shape;
  const bool want_lse = lse.data != nullptr;
  m.comm.set_activity(std::string("strategy ") + to_string(m.cfg.strategy) +
                      " forward, checks before the pass");
  m.comm.agree(want_lse ? 1 : 0, "forward: whether lse is requested (empty on some ranks only)");
  m.comm.agree_on([&] {
    check_device("DistAttention::forward", m.runs_on, "q", q, "k", k, "v", v, "out", out, "lse", lse);
    check_operand(q, "q", s.B, m.S_local, s.H, s.D, s.dtype, Role::Input);
    check_operand(k, "k", s.B, m.S_local, s.H_kv, s.D, s.dtype, Role::Input);
    check_operand(v, "v", s.B, m.S_local, s.H_kv, s.D, s.dtype, Role::Input);
    check_operand(out, "out", s.B, m.S_local, s.H, s.D, s.dtype, Role::Result);
    if (want_lse) check_rows(lse, "lse", s.B, s.H, m.S_local);
    const auto& pos = m.plan->layout().positions[static_cast<std::size_t>(m.comm.rank())];
    for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}})
      check_finite(*m.device, *t, name, pos);
  });
  m.comm.reset_counters();
  m.stats = DistStats{};
  const auto t0 = std::chrono::steady_clock::now();
  const device::Device& dev = *m.device;
  device::Buffer scratch;  // the strategies that compute lse anyway get a buffer to write it to
  const TensorView lse_out = !want_lse && !lse_optional(m.cfg.strategy)
                                 ? f32_buffer(dev, {s.B, s.H, m.S_local}, scratch, m.runs_on)
                                 : lse;
  // Every strategy moves Q, K, V, dO in their storage dtype (plan_strategies.cc counts them so)
  // and computes out in fp32, rounded once here.
  device::Buffer out32;
  const TensorView oa = as_f32(dev, out, out32, m.runs_on);
  strategies::run_pass(m.comm, std::string(to_string(m.cfg.strategy)) + " forward", [&] {
    m.strategy->forward(q, k, v, oa, lse_out, m.stats);
    finish(dev, out, oa);
    dev.wait(dev.record());  // the results are complete on return (and the time is the device's)
  });
  m.stats.seconds = strategies::seconds_since(t0);
  m.stats.bytes_sent = m.comm.counters().bytes_sent;
  m.stats.bytes_sent_inter_node = m.comm.counters().bytes_sent_inter_node;
  m.stats.messages_sent = m.comm.counters().messages_sent;
}

void DistAttention::backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                             const TensorView& v, const TensorView& out, const TensorView& lse,
                             const TensorView& dq, const TensorView& dk, const TensorView& dv) {
  Impl& m = *impl_;
  const ProblemShape& s = m.shape;
  const bool has_lse = lse.data != nullptr;
  m.comm.set_activity(std::string("strategy ") + to_string(m.cfg.strategy) +
                      " backward, checks before the pass");
  m.comm.agree(has_lse ? 1 : 0, "backward: whether lse is passed (empty on some ranks only)");
  m.comm.agree_on([&] {
    check_device("DistAttention::backward", m.runs_on, "dout", dout, "q", q, "k", k, "v", v, "out", out,
                 "lse", lse, "dq", dq, "dk", dk, "dv", dv);
    check_operand(dout, "dout", s.B, m.S_local, s.H, s.D, s.dtype, Role::Input);
    check_operand(q, "q", s.B, m.S_local, s.H, s.D, s.dtype, Role::Input);
    check_operand(k, "k", s.B, m.S_local, s.H_kv, s.D, s.dtype, Role::Input);
    check_operand(v, "v", s.B, m.S_local, s.H_kv, s.D, s.dtype, Role::Input);
    check_operand(out, "out", s.B, m.S_local, s.H, s.D, s.dtype, Role::Result);
    if (has_lse) check_rows(lse, "lse", s.B, s.H, m.S_local);
    check_operand(dq, "dq", s.B, m.S_local, s.H, s.D, s.dtype, Role::Result);
    check_operand(dk, "dk", s.B, m.S_local, s.H_kv, s.D, s.dtype, Role::Result);
    check_operand(dv, "dv", s.B, m.S_local, s.H_kv, s.D, s.dtype, Role::Result);
    const auto& pos = m.plan->layout().positions[static_cast<std::size_t>(m.comm.rank())];
    for (const auto& [t, name] :
         {std::pair{&dout, "dout"}, std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}})
      check_finite(*m.device, *t, name, pos);
  });
  // Q, K, V, dO, out reach the strategy in their storage dtype; dQ, dK, dV are accumulated in
  // fp32 (partials on the write ring included) and rounded once at the end.
  const device::Device& dev = *m.device;
  device::Buffer dq32, dk32, dv32;
  const TensorView dqa = as_f32(dev, dq, dq32, m.runs_on), dka = as_f32(dev, dk, dk32, m.runs_on),
                   dva = as_f32(dev, dv, dv32, m.runs_on);
  // Collective and agreed: every rank gets the same answer, so the same verdict.
  if (!has_lse)
    BURST_CHECK(m.strategy->backward_without_lse(q, k, v, out), InvalidArgument,
                "backward: lse is empty, but ", to_string(m.cfg.strategy),
                lse_optional(m.cfg.strategy)
                    ? " holds no saved forward context of these q, k, v, out on every rank (saved_contexts="
                    : " needs the forward's lse (saved_contexts=",
                m.cfg.saved_contexts, "); pass the lse of the forward");
  m.comm.reset_counters();
  m.stats = DistStats{};
  const auto t0 = std::chrono::steady_clock::now();
  strategies::run_pass(m.comm, std::string(to_string(m.cfg.strategy)) + " backward", [&] {
    m.strategy->backward(dout, q, k, v, out, lse, dqa, dka, dva, m.stats);
    finish(dev, dq, dqa);
    finish(dev, dk, dka);
    finish(dev, dv, dva);
    dev.wait(dev.record());
  });
  m.stats.seconds = strategies::seconds_since(t0);
  m.stats.bytes_sent = m.comm.counters().bytes_sent;
  m.stats.bytes_sent_inter_node = m.comm.counters().bytes_sent_inter_node;
  m.stats.messages_sent = m.comm.counters().messages_sent;
}

}  // namespace burst
