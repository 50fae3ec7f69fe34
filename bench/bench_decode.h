// bench/bench_decode.h — `burst bench decode`: distributed decode over a sharded KV cache
// (burst/kv_cache.h) at several context lengths, under mpirun, one JSON line per context.
#pragma once

namespace CLI {
class App;
}

namespace burst::bench {

/// Registers `decode` under the `bench` subcommand:
///   mpirun -n P burst bench decode --context 65536,262144,1048576 [--batch B] [--heads H]
///        [--kv-heads H_kv] [--dim D] [--new-tokens S_q] [--chunk C] [--threads T] [--dtype fp32|bf16]
///        [--repeats N] [--warmup N] [--no-dram-probe]
/// Per context (rank 0 prints): the cache (storage --dtype) is prefilled with `context` random
/// tokens per sequence (contiguous layout: rank r holds the r-th slice), then each repeat is one
/// generation step: DistKVCache::decode(ids, k_new, v_new, q, ...) appends S_q tokens and decodes
/// S_q query rows under one agreement. seconds_per_token = median over repeats of the max over
/// ranks of the step's seconds / S_q; bytes_per_token = max over ranks of payload bytes sent per
/// step / S_q (formula B·S_q·H·(D+1)·4·(P−1), printed too; the agreement's 5 values per rank are
/// not payload); kv_bytes_per_rank = max over ranks of cached K/V bytes (tokens·H_kv·D·2·
/// sizeof(dtype)); kv_bytes_read_per_token and kv_stream_gbs = bytes the local kernels streamed /
/// their seconds (DecodeStats::local_seconds: the split-KV partials and chunk merge, no
/// communication; median, max over ranks); dram_read_gbs = run_memory_read_probe over a 512 MiB
/// buffer (≫ last-level cache) on every rank at once, right after the timed repeats of each
/// context; stream_fraction = kv_stream_gbs / dram_read_gbs. Flop per step: 4·B·S_q·H·D·context.
/// Collective: every rank parses the same argv. Throws: burst::Error on bad options.
void add_decode_bench(CLI::App& bench);

}  // namespace burst::bench
