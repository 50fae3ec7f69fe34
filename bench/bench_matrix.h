// bench/bench_matrix.h — `burst bench matrix`: every strategy × layout × mask × length × pass
// on the ranks it is given (run under mpirun), one JSON line per case.
#pragma once

namespace CLI {
class App;
}

namespace burst::bench {

/// Registers `matrix` under the `bench` subcommand:
///   mpirun -n P burst bench matrix [--strategies a,b] [--layouts a,b] [--masks a,b|all]
///        [--seqs 1024,2048] [--passes fwd,bwd] [--batch B --heads H --kv-heads H_kv --dim D]
///        [--threads T] [--repeats N] [--warmup N] [--check-max-seq S] [--cluster SPEC]
///        [--memory-limit BYTES] [--dtype fp32|bf16|fp16] [--output FILE]
/// Per case (rank 0 prints): max-over-ranks median seconds after warm-up, GFLOP/s per rank on
/// the mask area, bytes sent per rank, exposed communication, balance (max/mean per-rank kernel
/// time), peak memory per rank (local tensors + the strategy's buffers), max error against a
/// single-process run of the whole sequence (cases with S ≤ --check-max-seq, before timing),
/// and the cost model's prediction when --cluster is given. Cases a strategy cannot express,
/// or that would not fit --memory-limit, are printed as status "skipped" with the reason.
/// --dtype stores q, k, v, dout and results in that dtype (records carry `dtype` and
/// `arithmetic`: bf16-dot where bf16 runs on vdpbf16ps — burst, ring, allgather, which keep 16-bit
/// tensors; the other strategies get fp32 stand-ins — and the prediction uses the same bytes and
/// rates).
/// With --output, completed cases already in the file are skipped (restartable sweeps).
/// Progress: one line per case on stderr (rank 0), no carriage returns.
/// Collective: every rank parses the same argv. Throws: burst::Error on bad options.
void add_matrix_bench(CLI::App& bench);

}  // namespace burst::bench
