// The public kernel boundary: validates every input once (messages name the values), fixes
// defaults (scale 1/sqrt(D), global positions, mask lengths, threads, ISA), splits varlen THD
// calls per sequence and dispatches to the reference or tiled kernel (kernels/kernels.h).
#include "burst/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attention_call.h"
#include "burst/dispatch.h"
#include "burst/error.h"
#include "kernels/convert.h"
#include "kernels/kernels.h"
#include "kernels/microkernels.h"
#include "kernels/step.h"

namespace burst {

const char* to_string(KernelImpl impl) noexcept { return impl == KernelImpl::Tiled ? "tiled" : "reference"; }
const char* to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::Auto: return "auto";
    case Isa::Avx512Bf16: return "avx512bf16";
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Portable: return "portable";
    case Isa::Amx: return "amx";
    case Isa::AmxEmulated: return "amx-emulated";
  }
  return "?";
}
Isa detect_isa() noexcept {
  // F16C is required with either SIMD table: the bf16/fp16 converters of both are the AVX2+F16C
  // ones (kernels/convert.h). Every AVX2 CPU made so far has it; one without falls back to portable.
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  // AVX-512 DQ with F: the tables' exp2 takes r = x − round(x) from vreduceps. Every AVX-512
  // CPU but the Xeon Phi has both; a Xeon Phi runs the AVX2 table.
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  // The bf16 table is compiled with -mavx512bw -mavx512vl -mavx512bf16 (masked 16-bit stores,
  // vcvtneps2bf16, vdpbf16ps): all three must be reported.
  if (avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bf16"))
    return Isa::Avx512Bf16;
  if (avx512) return Isa::Avx512;
  if (avx2) return Isa::Avx2;
  return Isa::Portable;
}

bool isa_available(Isa isa) noexcept {
  const Isa best = detect_isa();
  switch (isa) {
    case Isa::Auto:
    case Isa::Portable: return true;
    case Isa::Amx: return detect_cpu_features().amx_usable();
    case Isa::AmxEmulated: return best != Isa::Portable;  // the AVX2+F16C converters and a SIMD table
    case Isa::Avx512Bf16:
    case Isa::Avx512:
    case Isa::Avx2: return static_cast<int>(isa) >= static_cast<int>(best);  // enum order: best first
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Amx, Isa::Avx512Bf16, Isa::Avx512, Isa::Avx2, Isa::Portable, Isa::AmxEmulated})
    if (isa_available(isa)) out.push_back(isa);
  return out;
}

double run_fma_probe(Isa isa, std::int64_t iters) {
  const Isa best = detect_isa();
  if (isa == Isa::Auto || isa == Isa::Amx || isa == Isa::AmxEmulated) isa = best;
  BURST_CHECK(isa_available(isa), Unsupported, "run_fma_probe: isa=", to_string(isa),
              " requested but this CPU supports at most ", to_string(best));
  BURST_CHECK(iters >= 0, InvalidArgument, "run_fma_probe: iters=", iters, " must be >= 0");
  const kernels::Microkernels& mk = kernels::microkernels(isa);
  volatile float sink = mk.fma_probe(iters);  // the checksum keeps the chains from being elided
  (void)sink;
  return static_cast<double>(iters) * mk.fma_probe_chains * 2 * mk.width;
}

double run_amx_probe(std::int64_t iters) {
  BURST_CHECK(isa_available(Isa::Amx), Unsupported,
              "run_amx_probe: AMX is absent or refused on this CPU (amx_bf16=",
              detect_cpu_features().amx_bf16, ", OS tile state=", detect_cpu_features().amx_os,
              ", permitted=", detect_cpu_features().amx_permitted, ")");
  BURST_CHECK(iters >= 0, InvalidArgument, "run_amx_probe: iters=", iters, " must be >= 0");
  volatile float sink = kernels::microkernels(Isa::Amx).bf16_dot_probe(iters);
  (void)sink;
  return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2;
}

double run_bf16_dot_probe(std::int64_t iters) {
  BURST_CHECK(detect_isa() == Isa::Avx512Bf16, Unsupported,
              "run_bf16_dot_probe: this CPU has no AVX512_BF16 (best isa ", to_string(detect_isa()), ")");
  BURST_CHECK(iters >= 0, InvalidArgument, "run_bf16_dot_probe: iters=", iters, " must be >= 0");
  const kernels::Microkernels& mk = kernels::microkernels(Isa::Avx512Bf16);
  volatile float sink = mk.bf16_dot_probe(iters);
  (void)sink;
  return static_cast<double>(iters) * 16 * 4 * mk.width;
}

double run_memory_read_probe(Isa isa, const float* data, std::int64_t n) {
  const Isa best = detect_isa();
  if (isa == Isa::Auto || isa == Isa::Amx || isa == Isa::AmxEmulated) isa = best;
  BURST_CHECK(isa_available(isa), Unsupported, "run_memory_read_probe: isa=", to_string(isa),
              " requested but this CPU supports at most ", to_string(best));
  BURST_CHECK(n >= 0 && (data != nullptr || n == 0), InvalidArgument, "run_memory_read_probe: n=", n,
              " must be >= 0 with data");
  const kernels::Microkernels& mk = kernels::microkernels(isa);
  const std::int64_t step = std::int64_t{1} << 28;  // row_max takes an int count (a multiple of width)
  const std::int64_t vec_end = n / mk.width * mk.width;
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < vec_end; i += step)
    mx = std::max(mx, mk.row_max(data + i, static_cast<int>(std::min(step, vec_end - i))));
  for (std::int64_t i = vec_end; i < n; ++i) mx = std::max(mx, data[i]);
  volatile float sink = mx;  // keeps the loads from being elided
  (void)sink;
  return 4.0 * static_cast<double>(n);
}

namespace entry {

constexpr std::int64_t kMaxHeadDim = 256;

// ---------------------------------------------------------------- the validated call -------

void check_cu(const char* api, const char* name, const std::vector<std::int32_t>& cu, std::int64_t T) {
  BURST_CHECK(cu.size() >= 2, InvalidArgument, api, ": ", name, " must have batch+1 >= 2 entries, got ",
              cu.size());
  BURST_CHECK(cu[0] == 0, InvalidArgument, api, ": ", name, "[0] must be 0, got ", cu[0]);
  for (std::size_t i = 1; i < cu.size(); ++i)
    BURST_CHECK(cu[i] >= cu[i - 1], InvalidArgument, api, ": ", name, " must be non-decreasing, got ", name,
                "[", i - 1, "]=", cu[i - 1], " > ", name, "[", i, "]=", cu[i]);
  BURST_CHECK(cu.back() == T, InvalidArgument, api, ": ", name, " ends at ", cu.back(),
              " but the tensor has T=", T, " tokens");
}

std::vector<std::int64_t> positions(const char* api, const char* name, const std::int64_t* explicit_pos,
                                    std::int64_t offset, std::int64_t n) {
  std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    pos[static_cast<std::size_t>(i)] = explicit_pos ? explicit_pos[i] : offset + i;
    BURST_CHECK(pos[static_cast<std::size_t>(i)] >= 0, InvalidArgument, api, ": ", name, "[", i,
                "]=", pos[static_cast<std::size_t>(i)], " is negative");
    BURST_CHECK(i == 0 || pos[static_cast<std::size_t>(i)] > pos[static_cast<std::size_t>(i - 1)],
                InvalidArgument, api, ": ", name, " must be strictly increasing, got [", i - 1,
                "]=", pos[static_cast<std::size_t>(i - 1)], ", [", i, "]=", pos[static_cast<std::size_t>(i)]);
  }
  return pos;
}

std::int64_t global_length(const char* api, const char* name, std::int64_t given,
                           const std::vector<std::int64_t>& pos) {
  const std::int64_t need = pos.empty() ? 0 : pos.back() + 1;
  if (given < 0) return need;
  BURST_CHECK(given >= need, InvalidArgument, api, ": ", name, "=", given,
              " is smaller than the largest position + 1 = ", need);
  return given;
}

Call validate(const char* api, const TensorView& q, const TensorView& k, const TensorView& v,
              const AttentionParams& p, KernelPass pass) {
  Call c;
  c.varlen = !p.cu_seqlens_q.empty() || !p.cu_seqlens_kv.empty();
  const int nd = c.varlen ? 3 : 4;
  c.dtype = check_input_dtypes(api, q, k, v);
  check_tensor(api, "q", q, nd);
  check_tensor(api, "k", k, nd);
  check_same_shape(api, "v", v, "k", k);
  const int hd = nd - 2;  // index of the head dim
  c.H = q.shape[static_cast<std::size_t>(hd)];
  c.H_kv = k.shape[static_cast<std::size_t>(hd)];
  c.D = q.shape[static_cast<std::size_t>(hd + 1)];
  c.S_q = q.shape[static_cast<std::size_t>(hd - 1)];
  c.S_kv = k.shape[static_cast<std::size_t>(hd - 1)];
  BURST_CHECK(c.varlen || q.shape[0] == k.shape[0], InvalidArgument, api, ": batch of q (", q.shape[0],
              ") differs from batch of k (", k.shape[0], "): q ", q.describe(), ", k ", k.describe());
  BURST_CHECK(k.shape[static_cast<std::size_t>(hd + 1)] == c.D, InvalidArgument, api,
              ": head dim of q (D=", c.D, ") differs from k (D=", k.shape[static_cast<std::size_t>(hd + 1)],
              ")");
  BURST_CHECK(c.D >= 1 && c.D <= kMaxHeadDim, InvalidArgument, api, ": head dim D=", c.D, " must be in [1, ",
              kMaxHeadDim, "]");
  BURST_CHECK(c.H >= 1 && c.H_kv >= 1 && c.H % c.H_kv == 0, InvalidArgument, api, ": H=", c.H,
              " query heads must be a positive multiple of H_kv=", c.H_kv, " KV heads (GQA)");
  if (p.softmax_scale) {
    const float s = *p.softmax_scale;
    BURST_CHECK(std::isfinite(s) && s > 0.0f, InvalidArgument, api, ": softmax_scale=", s,
                " must be finite and > 0");
    c.scale = s;
  } else {
    c.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D)));
  }
  BURST_CHECK(p.num_threads >= 0, InvalidArgument, api, ": num_threads=", p.num_threads, " must be >= 0");
  c.threads = p.num_threads > 0 ? p.num_threads : std::max(1, omp_get_max_threads());
  BURST_CHECK(p.block_q >= 0 && p.block_kv >= 0, InvalidArgument, api, ": block_q=", p.block_q,
              " and block_kv=", p.block_kv, " must be >= 0 (0 = default)");
  c.isa = resolve_isa(p.isa, c.dtype, pass);  // Auto: the fastest path for this dtype (burst/dispatch.h)
  BURST_CHECK(isa_available(c.isa), Unsupported, api, ": isa=", to_string(c.isa),
              " requested but this CPU supports at most ", to_string(detect_isa()),
              c.isa == Isa::Amx ? " (AMX absent or refused)" : "");

  if (!c.varlen) {
    c.B = q.shape[0];
    BURST_CHECK(p.q_positions || p.q_offset >= 0, InvalidArgument, api, ": q_offset=", p.q_offset, " < 0");
    BURST_CHECK(p.kv_positions || p.kv_offset >= 0, InvalidArgument, api, ": kv_offset=", p.kv_offset,
                " < 0");
    c.q_pos = positions(api, "q_positions", p.q_positions, p.q_offset, c.S_q);
    c.kv_pos = positions(api, "kv_positions", p.kv_positions, p.kv_offset, c.S_kv);
    c.masks.emplace_back(p.mask, global_length(api, "seq_q_global", p.seq_q_global, c.q_pos),
                         global_length(api, "seq_kv_global", p.seq_kv_global, c.kv_pos));
    return c;
  }
  // Varlen (flash_attn_varlen semantics): sequences attend independently, positions restart at 0.
  BURST_CHECK(p.q_offset == 0 && p.kv_offset == 0 && !p.q_positions && !p.kv_positions, InvalidArgument, api,
              ": varlen (cu_seqlens) calls take positions from cu_seqlens; q_offset=", p.q_offset,
              ", kv_offset=", p.kv_offset, " and explicit positions must be unset");
  check_cu(api, "cu_seqlens_q", p.cu_seqlens_q, c.S_q);
  check_cu(api, "cu_seqlens_kv", p.cu_seqlens_kv, c.S_kv);
  BURST_CHECK(p.cu_seqlens_q.size() == p.cu_seqlens_kv.size(), InvalidArgument, api, ": cu_seqlens_q has ",
              p.cu_seqlens_q.size(), " entries but cu_seqlens_kv has ", p.cu_seqlens_kv.size());
  c.cu_q = p.cu_seqlens_q;
  c.cu_kv = p.cu_seqlens_kv;
  c.B = static_cast<std::int64_t>(c.cu_q.size()) - 1;
  std::int64_t max_len = 0;
  for (std::int64_t b = 0; b < c.B; ++b) {
    const auto u = static_cast<std::size_t>(b);
    max_len = std::max<std::int64_t>({max_len, c.cu_q[u + 1] - c.cu_q[u], c.cu_kv[u + 1] - c.cu_kv[u]});
  }
  c.q_pos = positions(api, "positions", nullptr, 0, max_len);
  c.kv_pos = c.q_pos;
  const bool shared = p.seq_q_global >= 0 && p.seq_kv_global >= 0;
  for (std::int64_t b = 0; b < (shared ? 1 : c.B); ++b) {
    const auto u = static_cast<std::size_t>(b);
    const std::int64_t len_q = shared ? p.seq_q_global : c.cu_q[u + 1] - c.cu_q[u];
    const std::int64_t len_kv = shared ? p.seq_kv_global : c.cu_kv[u + 1] - c.cu_kv[u];
    try {
      c.masks.emplace_back(p.mask, len_q, len_kv);
    } catch (const Error& e) {
      BURST_FAIL(InvalidArgument, api, ": varlen sequence ", b, " (S_q=", len_q, ", S_kv=", len_kv,
                 "): ", e.message());
    }
  }
  if (shared)
    for (std::int64_t b = 0; b < c.B; ++b) {
      const auto u = static_cast<std::size_t>(b);
      BURST_CHECK(
          c.cu_q[u + 1] - c.cu_q[u] <= p.seq_q_global && c.cu_kv[u + 1] - c.cu_kv[u] <= p.seq_kv_global,
          InvalidArgument, api, ": varlen sequence ", b, " is longer than seq_q_global=", p.seq_q_global,
          " / seq_kv_global=", p.seq_kv_global);
    }
  return c;
}

// ---------------------------------------------------------------- problem building ---------

TensorView sequence(const TensorView& t, bool varlen, std::int64_t row0, std::int64_t n) {
  if (!varlen) return t;
  TensorView s = t;
  s.ndim = 4;
  s.shape = {1, n, t.shape[1], t.shape[2]};
  s.stride = {0, t.stride[0], t.stride[1], t.stride[2]};
  s.data = static_cast<char*>(t.data) + row0 * t.stride[0] * static_cast<std::int64_t>(dtype_size(t.dtype));
  return s;
}
TensorView sequence_rows(const TensorView& t, bool varlen, std::int64_t row0, std::int64_t n) {
  if (!varlen) return t;
  TensorView s = t;
  s.ndim = 3;
  s.shape = {1, t.shape[0], n, 0};
  s.stride = {0, t.stride[0], t.stride[1], 0};
  s.data = t.f32() + row0 * t.stride[1];
  return s;
}

void backward_core(const char* api, const Call& c, const TensorView& dout, const TensorView& q,
                   const TensorView& k, const TensorView& v, const TensorView& lse, const TensorView& delta,
                   const TensorView& dq, const TensorView& dk, const TensorView& dv,
                   const AttentionParams& params, bool accumulate) {
  check_gradients(api, c, dout, q, k, v, dq, dk, dv, accumulate);
  const bool vl = c.varlen;
  for_each_problem(c, params, [&](const kernels::KernelParams& sp, const Seq& s) {
    kernels::step_backward(sequence(dout, vl, s.q0, s.nq), sequence(q, vl, s.q0, s.nq),
                           sequence(k, vl, s.kv0, s.nkv), sequence(v, vl, s.kv0, s.nkv),
                           sequence_rows(lse, vl, s.q0, s.nq), sequence_rows(delta, vl, s.q0, s.nq),
                           sequence(dq, vl, s.q0, s.nq), sequence(dk, vl, s.kv0, s.nkv),
                           sequence(dv, vl, s.kv0, s.nkv), sp, accumulate);
  });
}

}  // namespace entry

using namespace entry;  // NOLINT(google-build-using-namespace): this file's own helpers

// ---------------------------------------------------------------- public entry points ------

// check_device for host-only entry points that have a twin on the device seam: the refusal also
// names that twin (the library burst links no CUDA, docs/gpu.md).
template <typename... Operands>
void check_host_or_name(const char* api, const char* twin, const Operands&... operands) {
  try {
    check_device(api, kHost, operands...);
  } catch (const Error& e) {
    BURST_FAIL(InvalidArgument, e.message(), " (the library burst runs on the host: GPU memory goes through ",
               twin, ", src/attention_device.h, with burst_cuda's device::CudaDevice)");
  }
}

void attention_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, const AttentionParams& params) {
  constexpr const char* api = "attention_forward";
  check_host_or_name(api, "entry::attention_forward_on", "q", q, "k", k, "v", v, "out", out, "lse", lse);
  const Call c = validate(api, q, k, v, params, KernelPass::Forward);
  check_forward_outputs(api, c, q, k, v, out, lse);
  const bool vl = c.varlen;
  for_each_problem(c, params, [&](const kernels::KernelParams& sp, const Seq& s) {
    kernels::step_forward(sequence(q, vl, s.q0, s.nq), sequence(k, vl, s.kv0, s.nkv),
                          sequence(v, vl, s.kv0, s.nkv), sequence(out, vl, s.q0, s.nq),
                          sequence_rows(lse, vl, s.q0, s.nq), sp);
  });
}

void attention_delta(const TensorView& dout, const TensorView& out, const TensorView& delta) {
  constexpr const char* api = "attention_delta";
  check_device(api, kHost, "dout", dout, "out", out, "delta", delta);
  BURST_CHECK(out.ndim == 3 || out.ndim == 4, InvalidArgument, api,
              ": out must be [B,S,H,D] or [T,H,D], got ", out.describe());
  const bool varlen = out.ndim == 3;
  check_tensor(api, "out", out, out.ndim);
  check_same_shape(api, "dout", dout, "out", out);
  for (const auto& [name, t] : {std::pair{"out", out}, {"dout", dout}})
    BURST_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16, Unsupported, api,
                ": ", name, " has dtype ", to_string(t.dtype), "; f32, bf16 or f16 expected");
  const std::int64_t B = varlen ? 1 : out.shape[0], S = out.shape[varlen ? 0 : 1];
  const std::int64_t H = out.shape[varlen ? 1 : 2], D = out.shape[varlen ? 2 : 3];
  check_rows(api, "delta", delta, varlen, B, H, S);
  const auto o = kernels::bshd_operand<kernels::Operand>(sequence(out, varlen, 0, S));
  const auto g = kernels::bshd_operand<kernels::Operand>(sequence(dout, varlen, 0, S));
  const auto r = kernels::row_operand<kernels::MutRowOperand>(sequence_rows(delta, varlen, 0, S));
  const kernels::Converters& cv = kernels::converters(detect_isa());
  std::vector<float> x(static_cast<std::size_t>(D)), y(x.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t s = 0; s < S; ++s) {
        kernels::load_row(cv, o, b, s, h, static_cast<int>(D), x.data());
        kernels::load_row(cv, g, b, s, h, static_cast<int>(D), y.data());
        float acc = 0.0f;
        for (std::size_t d = 0; d < x.size(); ++d) acc += x[d] * y[d];
        r.data[b * r.sb + h * r.sh + s * r.ss] = acc;
      }
}

void attention_backward_with_delta(const TensorView& dout, const TensorView& q, const TensorView& k,
                                   const TensorView& v, const TensorView& lse, const TensorView& delta,
                                   const TensorView& dq, const TensorView& dk, const TensorView& dv,
                                   const AttentionParams& params, bool accumulate) {
  constexpr const char* api = "attention_backward_with_delta";
  check_device(api, kHost, "dout", dout, "q", q, "k", k, "v", v, "lse", lse, "delta", delta, "dq", dq, "dk",
               dk, "dv", dv);
  const Call c = validate(api, q, k, v, params, KernelPass::Backward);
  check_same_shape(api, "dout", dout, "q", q);
  check_rows(api, "lse", lse, c.varlen, c.B, c.H, c.S_q);
  check_rows(api, "delta", delta, c.varlen, c.B, c.H, c.S_q);
  backward_core(api, c, dout, q, k, v, lse, delta, dq, dk, dv, params, accumulate);
}

void attention_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv, const AttentionParams& params) {
  constexpr const char* api = "attention_backward";
  check_host_or_name(api, "entry::attention_backward_on", "dout", dout, "q", q, "k", k, "v", v, "out", out,
                     "lse", lse, "dq", dq, "dk", dk, "dv", dv);
  const Call c = validate(api, q, k, v, params, KernelPass::Backward);
  check_same_shape(api, "dout", dout, "q", q);
  check_same_shape(api, "out", out, "q", q);
  check_rows(api, "lse", lse, c.varlen, c.B, c.H, c.S_q);
  Tensor delta(c.varlen ? std::vector<std::int64_t>{c.H, c.S_q} : std::vector<std::int64_t>{c.B, c.H, c.S_q});
  attention_delta(dout, out, delta.view());
  backward_core(api, c, dout, q, k, v, lse, delta.view(), dq, dk, dv, params, false);
}

AttentionOutput attention_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const AttentionParams& params) {
  AttentionOutput r;
  if (q.ndim == 3) {
    r.out = Tensor({q.shape[0], q.shape[1], q.shape[2]});
    r.lse = Tensor({q.shape[1], q.shape[0]});
  } else {
    BURST_CHECK(q.ndim == 4, InvalidArgument, "attention_forward: q must be [B,S,H,D] or [T,H,D], got ",
                q.describe());
    r.out = Tensor({q.shape[0], q.shape[1], q.shape[2], q.shape[3]});
    r.lse = Tensor({q.shape[0], q.shape[2], q.shape[1]});
  }
  attention_forward(q, k, v, r.out.view(), r.lse.view(), params);
  return r;
}

AttentionGrads attention_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                                  const TensorView& v, const TensorView& out, const TensorView& lse,
                                  const AttentionParams& params) {
  auto like = [](const TensorView& t) {
    BURST_CHECK(t.ndim == 3 || t.ndim == 4, InvalidArgument,
                "attention_backward: tensors must be [B,S,H,D] or [T,H,D], got ", t.describe());
    return Tensor(std::vector<std::int64_t>(t.shape.begin(), t.shape.begin() + t.ndim));
  };
  AttentionGrads g{like(q), like(k), like(k)};
  attention_backward(dout, q, k, v, out, lse, g.dq.view(), g.dk.view(), g.dv.view(), params);
  return g;
}

}  // namespace burst
