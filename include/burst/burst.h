// burst/burst.h — the umbrella header: everything a user of burst needs, in one include.
//
// What burst is. Exact attention over sequences longer than one process holds. The sequence is
// split across MPI ranks (context parallelism); each rank keeps its slice of Q, K, V; blocks
// move in a ring (BurstAttention, RingAttention, striped / zigzag layouts), by all-to-all
// (Ulysses, USP) or by all-gather (Llama-3), and partial results are merged with the online
// softmax, so forward and backward equal single-process attention. CPU only. Storage fp32, bf16
// or fp16; accumulation always fp32 (bf16 on AVX512-BF16 multiplies bf16 operands, attention.h).
//
// The modules, bottom-up (each header is the manual of its module):
//   error.h          burst::Error (kinds InvalidArgument / Unsupported / Communication / Internal);
//                    every entry point validates once and throws with the values in the message.
//   tensor.h         TensorView (non-owning, strides in elements, up to 4 dims), Tensor (owning).
//   mask.h           masks on GLOBAL positions: slices (full / causal / inv-causal / bi-causal,
//                    windows), flash_attn shorthands, the 14 benchmark mask types, the tile classifier.
//   softmax_merge.h  the online softmax and the (out, lse) merge — the only place that math lives.
//   attention.h      attention_forward / attention_backward on one process: Reference (fp64 oracle)
//                    and Tiled (FlashAttention-2 style, AVX-512 / AVX2 / portable at run time).
//   comm.h           Communicator: RAII over an MPI_Comm_dup (include burst/comm_interop.h, which
//                    pulls in <mpi.h>, to build one from an MPI_Comm).
//   plan.h           pure planning: which rank owns which tokens, what moves at each step.
//   strategy.h       DistAttention: the distributed forward / backward over a Communicator.
//   kv_cache.h       DistKVCache: a KV cache sharded over ranks and distributed decode (inference).
//   cost_model.h     predicted time and bytes of a plan, without running it.
//
// Layout conventions (flash_attn's, so tensors move between libraries without copies):
//   q, out, dout, dq   [B, S_q, H, D]      BSHD, any strides, D contiguous (stride 1)
//   k, v, dk, dv       [B, S_kv, H_kv, D]  H % H_kv == 0; query head h reads KV head h / (H / H_kv)
//   lse, delta         [B, H, S_q]         fp32, natural log; a row with no visible key: lse = −inf
//   SDPA's [B, H, S, D] memory: pass a BSHD-shaped view with permuted strides.
//   varlen THD         q [T_q, H, D], k, v [T_kv, H_kv, D], lse [H, T_q], with int32 cu_seqlens.
//   Masks are evaluated on global positions: a rank holding rows [offset, offset + S_local) of a
//   longer sequence passes q_offset / kv_offset (or explicit position arrays) and the global
//   lengths, so one mask description serves every rank and every layout.
//
// Worked example — causal grouped-query attention on one process, forward and backward:
//
//   #include <burst/burst.h>
//
//   burst::Tensor q({1, 256, 8, 64}), k({1, 256, 2, 64}), v({1, 256, 2, 64});   // BSHD, GQA 8:2
//   // ... fill q, k, v (q.data() is a contiguous float array) ...
//   burst::AttentionParams p;
//   p.mask = burst::Mask::causal_mask();                  // or make_benchmark_mask(...), slices, ...
//   auto [out, lse] = burst::attention_forward(q.view(), k.view(), v.view(), p);
//   // out [1,256,8,64], lse [1,8,256]; p.softmax_scale defaults to 1/sqrt(64)
//   burst::Tensor dout({1, 256, 8, 64});                  // ... the gradient of the loss wrt out ...
//   auto [dq, dk, dv] = burst::attention_backward(dout.view(), q.view(), k.view(), v.view(),
//                                                 out.view(), lse.view(), p);
//
// Distributed: build a burst::Communicator (comm_interop.h), a burst::DistAttention with the
// strategy, layout, problem shape and mask (identical on every rank), then call forward /
// backward on each rank's local shards; positions() gives the global positions of the local
// tokens (for RoPE). See docs/api.md and docs/strategies.md.
#pragma once

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/cost_model.h"
#include "burst/error.h"
#include "burst/kv_cache.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/softmax_merge.h"
#include "burst/strategy.h"
#include "burst/tensor.h"
