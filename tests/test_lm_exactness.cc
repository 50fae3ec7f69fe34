// Exactness of the distributed language model (MPI; run at 1..4 ranks): with the same seeds and
// data, `burst-lm train` on P ranks gives the same loss at every step as the single-process run
// through the local kernel engine — for the burst and ring strategies on the contiguous, zigzag
// and striped layouts — and `burst-lm eval` on P ranks (balanced layout) reproduces the
// single-process perplexity and passes its own self-check; under Megatron tensor parallelism
// (--strategy tp) loss, gradients, bytes and checkpoints match the single process. Tiny model,
// synthetic corpus.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "burst/comm.h"
#include "lm/data.h"
#include "lm/engine_factory.h"
#include "lm/fused_head_loss.h"
#include "lm/model_tp.h"
#include "lm/runtime.h"
#include "lm/train.h"
#include "lm_test_corpus.h"

namespace fs = std::filesystem;

namespace {

// fp32 end to end; the only differences between P values are summation orders (attention
// merge, gradient all-reduce), ~1e-7 relative per step. 1e-5 is the bound.
constexpr double kRtol = 1e-5;

struct Fixture {
  burst::Communicator comm = burst::Communicator::world();
  burst::Communicator self = comm.split(comm.rank(), 0);  // a 1-rank communicator per rank
  fs::path root;

  Fixture() {
    const std::int64_t id = comm.all_reduce_max(static_cast<std::int64_t>(::getpid()));
    root = fs::temp_directory_path() / ("burst_test_lm_exact_" + std::to_string(id));
    if (comm.rank() == 0) {
      fs::remove_all(root);
      // 5 books of a Markov-ish token stream: learnable, with boundaries inside training windows.
      burst::test::write_markov_corpus(root / "data", 11, 5, 150, 70);
    }
    comm.barrier();
  }
  ~Fixture() {
    comm.barrier();
    if (comm.rank() == 0) fs::remove_all(root);
  }

  burst::lm::TrainOptions train_options(const std::string& out) const {
    burst::lm::TrainOptions o;
    o.run.data_dir = root / "data";
    o.run.verbose = false;
    o.run.head_chunk = 40;
    o.run.dist.num_threads = 1;
    o.out_dir = root / out;
    o.model.d_model = 32;
    o.model.layers = 2;
    o.model.heads = 4;
    o.model.kv_heads = 2;
    o.model.head_dim = 8;
    o.model.ffn_hidden = 48;
    o.steps = 4;
    o.seq_len = 240;  // divisible by 2P for P = 1..4 and spanning book boundaries
    o.lr = 1e-2;
    o.warmup_steps = 1;
    o.plot = false;
    o.resume = false;
    return o;
  }

  // Trains `out` for 2 steps and returns the options of a balanced-layout eval of its
  // checkpoint that self-checks 3 books (the eval tests' common start).
  burst::lm::EvalOptions eval_options_after_training(const std::string& out) const {
    auto o = train_options(out);
    o.steps = 2;
    burst::lm::run_train(o, comm);
    burst::lm::EvalOptions e;
    e.run = o.run;
    e.run.dist.layout = burst::LayoutKind::Balanced;
    e.checkpoint = o.out_dir / "checkpoint.safetensors";
    e.verify_books = 3;
    return e;
  }
};

}  // namespace

TEST(LmExactness, TrainingLossMatchesSingleProcessForEveryStrategyAndLayout) {
  Fixture f;
  auto ref_opts = f.train_options("ref" + std::to_string(f.comm.rank()));
  ref_opts.run.engine = burst::lm::EngineKind::Local;
  const auto ref = burst::lm::run_train(ref_opts, f.self);
  ASSERT_EQ(ref.size(), 4u);
  EXPECT_LT(ref.back().loss, ref.front().loss);  // it learns
  for (auto strategy : {burst::StrategyKind::Burst, burst::StrategyKind::Ring}) {
    for (auto layout :
         {burst::LayoutKind::Contiguous, burst::LayoutKind::Zigzag, burst::LayoutKind::Striped}) {
      auto o = f.train_options("dist");
      o.run.dist.strategy = strategy;
      o.run.dist.layout = layout;
      const auto got = burst::lm::run_train(o, f.comm);
      ASSERT_EQ(got.size(), ref.size());
      for (std::size_t s = 0; s < ref.size(); ++s)
        EXPECT_NEAR(got[s].loss, ref[s].loss, kRtol * std::abs(ref[s].loss))
            << burst::to_string(strategy) << " / " << burst::to_string(layout) << " step " << s + 1
            << " P=" << f.comm.size();
    }
  }
}

// Seq-wise checkpointing (striped layout; the first half recomputed on an S/2 engine) trains
// to the same losses as the single-process run; a non-striped layout is refused on every rank
// with the same verdict (P > 1; on 1 rank every layout is trivially striped).
TEST(LmExactness, SeqWiseCheckpointingMatchesAndRefusesNonStripedLayouts) {
  Fixture f;
  auto ref_opts = f.train_options("ref" + std::to_string(f.comm.rank()));
  ref_opts.run.engine = burst::lm::EngineKind::Local;
  const auto ref = burst::lm::run_train(ref_opts, f.self);
  auto o = f.train_options("seqwise");
  o.recompute = burst::lm::Model::Recompute::SeqWise;
  o.run.dist.layout = burst::LayoutKind::Striped;
  const auto got = burst::lm::run_train(o, f.comm);
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t s = 0; s < ref.size(); ++s)
    EXPECT_NEAR(got[s].loss, ref[s].loss, kRtol * std::abs(ref[s].loss))
        << "step " << s + 1 << " P=" << f.comm.size();
  if (f.comm.size() > 1) {  // refused before any message: every rank throws, none hangs
    auto bad = f.train_options("seqwise_zigzag");
    bad.run.dist.layout = burst::LayoutKind::Zigzag;
    const std::int64_t S = burst::lm::padded_length(bad.seq_len, f.comm.size());
    EXPECT_THROW(burst::lm::make_engine(bad.run, f.comm, bad.model, S, burst::Mask::causal_mask(), true),
                 burst::Error);
  }
}

TEST(LmExactness, ResumeContinuesWithoutLosingSteps) {
  Fixture f;
  auto o = f.train_options("full");
  const auto full = burst::lm::run_train(o, f.comm);
  o.out_dir = f.root / "interrupted";
  o.stop_after = 2;  // stops after step 2 with a checkpoint, as an interrupted job would
  const auto first = burst::lm::run_train(o, f.comm);
  ASSERT_EQ(first.size(), 2u);
  o.stop_after = 0;
  o.resume = true;
  const auto resumed = burst::lm::run_train(o, f.comm);
  ASSERT_EQ(resumed.size(), full.size());
  for (std::size_t s = 0; s < full.size(); ++s) {
    EXPECT_EQ(resumed[s].step, static_cast<int>(s) + 1);
    // Same ranks, same deterministic kernels and reduction order: bitwise equal.
    EXPECT_EQ(resumed[s].loss, full[s].loss) << "step " << s + 1;
  }
}

// The time budget fixes the step count (the cosine schedule's length) after the third step; the
// checkpoint keeps it, so a resumed run continues that schedule instead of fitting its own (a
// killed, budgeted run then ends as the uninterrupted one would).
TEST(LmExactness, ResumeKeepsTheTimeBudgetsSchedule) {
  Fixture f;
  auto o = f.train_options("budget");
  o.steps = 5;
  o.time_budget_seconds = 1e-6;  // spent by step 3: the fit ends the run there (schedule of 3 steps)
  const auto first = burst::lm::run_train(o, f.comm);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(
      burst::lm::load_checkpoint(o.out_dir / "checkpoint.safetensors").header.value("schedule_steps", 0), 3);
  o.resume = true;
  o.time_budget_seconds = 1e6;  // would fit all 5 steps if the resumed run fitted anew
  const auto resumed = burst::lm::run_train(o, f.comm);
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_EQ(resumed[2].loss, first[2].loss);
}

TEST(LmExactness, EvalMatchesSingleProcessAndVerifiesItself) {
  Fixture f;
  auto e = f.eval_options_after_training("eval");
  const auto dist = burst::lm::run_eval(e, f.comm);
  e.run.engine = burst::lm::EngineKind::Local;
  const auto local = burst::lm::run_eval(e, f.self);
  EXPECT_TRUE(dist.at("verified").get<bool>()) << dist.dump();
  EXPECT_EQ(dist.at("tokens"), local.at("tokens"));
  EXPECT_NEAR(dist.at("perplexity").get<double>(), local.at("perplexity").get<double>(),
              kRtol * local.at("perplexity").get<double>());
  EXPECT_EQ(dist.at("ranks"), f.comm.size());
}

// ---- Megatron tensor parallelism in the model (--strategy tp, apps/lm/model_tp.h) -------------

namespace {

// Whole heads and SwiGLU slices on every rank for P = 1..4: H = 12; GQA (H_kv = 4) where P
// divides 4, else MHA.
burst::lm::TrainOptions tp_options(const Fixture& f, const std::string& out) {
  auto o = f.train_options(out);
  o.model.heads = 12;
  o.model.kv_heads = 4 % f.comm.size() == 0 ? 4 : 12;
  o.model.head_dim = 4;
  o.model.ffn_hidden = 48;
  o.run.tensor_parallel = true;
  return o;
}

// Gradients of the TP shards against the single-process model: the two differ only in the order
// of fp32 sums (GEMM blocking over the shard widths, the reduce-scatter's sum over ranks, the
// replicated gradients' all-reduce). A sum of n fp32 terms is off by at most n·u·Σ|terms|
// (u = 2⁻²⁴ ≈ 6e-8); the longest sums are the weight gradients' over S = 240 rows (1.4e-5),
// compounded through two layers' backward: 1e-4 of the tensor's largest entry. A missing
// reduction (an all-gather for a reduce-scatter, no all-reduce of a replicated gradient) is an
// O(1) error; the test checks that the un-reduced gradients do fail this tolerance.
constexpr double kGradTol = 1e-4;

double max_rel_err(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  return (got - want).abs().max().item<double>() / std::max(scale, 1e-30);
}

}  // namespace

TEST(LmExactness, TensorParallelLossAndGradientsMatchSingleProcess) {
  Fixture f;
  const int P = f.comm.size(), rank = f.comm.rank();
  const auto opts = tp_options(f, "unused");
  const burst::lm::Corpus corpus = burst::lm::load_corpus(f.root / "data");
  burst::lm::ModelConfig mc = opts.model;
  mc.vocab_size = corpus.vocab_size;
  const std::int64_t S = 240, S_padded = burst::lm::padded_length(S, P);
  const burst::lm::Window w = burst::lm::make_window(corpus, 101, S, S_padded);
  std::vector<std::int64_t> in, tg;
  std::vector<float> wt;
  auto loss_of = [&](const torch::Tensor& hidden, burst::lm::Model& m) {
    const auto n = static_cast<std::int64_t>(in.size());
    return burst::lm::fused_head_loss(hidden, m.head(), torch::from_blob(tg.data(), {n}, torch::kInt64),
                                      torch::from_blob(wt.data(), {n}), 40);
  };

  // The oracle: the full model in one process.
  burst::lm::Model ref(mc);
  std::vector<std::int64_t> all(static_cast<std::size_t>(S_padded));
  for (std::int64_t i = 0; i < S_padded; ++i) all[static_cast<std::size_t>(i)] = i;
  burst::lm::LocalEngine local(all, w.mask, S_padded, 1);
  burst::lm::gather_window(corpus, w, local.positions(), in, tg, wt);
  const auto ref_loss =
      loss_of(ref.forward(torch::from_blob(in.data(), {S_padded}, torch::kInt64), local), ref);
  ref_loss.backward();

  // The same weights split over P ranks.
  burst::lm::Model tp(mc);
  burst::lm::shard_model(tp, rank, P);
  burst::lm::TpEngine engine(f.comm, S_padded, w.mask, 1);
  burst::lm::gather_window(corpus, w, engine.positions(), in, tg, wt);
  const auto n_local = static_cast<std::int64_t>(in.size());
  ASSERT_EQ(n_local, S_padded / P);
  const auto tp_loss =
      loss_of(burst::lm::forward_tp(tp, torch::from_blob(in.data(), {n_local}, torch::kInt64), engine), tp);
  tp_loss.backward();
  std::vector<double> loss{tp_loss.item<double>()};
  burst::lm::all_reduce_sum_f64(f.comm, loss);
  EXPECT_NEAR(loss[0], ref_loss.item<double>(), kRtol * std::abs(ref_loss.item<double>())) << "P=" << P;

  std::vector<torch::Tensor> unreduced;
  for (auto& p : tp.parameters()) unreduced.push_back(p.grad().clone());
  const auto g = burst::lm::reduce_gradients_tp(tp, f.comm);
  double ref_sq = 0;
  for (std::size_t i = 0; i < ref.parameters().size(); ++i) {
    const auto& name = ref.names()[i];
    const auto split = burst::lm::tp_split(name);
    const auto want = ref.parameters()[i].grad();
    ref_sq += want.to(torch::kFloat64).pow(2).sum().item<double>();
    const auto got = burst::lm::tp_unshard(f.comm, tp.parameters()[i].grad(), split);
    ASSERT_EQ(got.sizes(), want.sizes()) << name;
    EXPECT_LE(max_rel_err(got, want), kGradTol) << name << " P=" << P;
    if (P > 1 && (name == "embed" || name == "head")) {  // each rank saw only its tokens
      EXPECT_GT(max_rel_err(unreduced[i], want), kGradTol)
          << name << ": the tolerance would not see a missing reduction";
    }
  }
  EXPECT_NEAR(g.norm, std::sqrt(ref_sq), kGradTol * std::sqrt(ref_sq));
  // Sharded weights really are 1/P of the full ones on every rank.
  EXPECT_EQ(tp.parameters()[2].size(0) * P, ref.parameters()[2].size(0)) << tp.names()[2];
}

TEST(LmExactness, TensorParallelTrainingMatchesAndItsCheckpointLoadsInOneProcess) {
  Fixture f;
  const int P = f.comm.size();
  auto ref_opts = tp_options(f, "ref" + std::to_string(f.comm.rank()));
  ref_opts.run.engine = burst::lm::EngineKind::Local;
  const auto ref = burst::lm::run_train(ref_opts, f.self);
  const auto o = tp_options(f, "tp");
  const auto got = burst::lm::run_train(o, f.comm);
  ASSERT_EQ(got.size(), ref.size());
  // Megatron-SP's bytes per rank and step: per layer 2 all-gathers and 2 reduce-scatters of
  // [S, d] forward and the same backward, each 4·(P−1)·S/P·d bytes; plus the all-reduce of the
  // replicated gradients (embedding, head: V·d each; 2L + 1 norms of d) and the 2-float
  // all-gather of the split gradients' squared norm.
  const std::int64_t S = burst::lm::padded_length(o.seq_len, P), d = o.model.d_model, V = 48;
  const std::int64_t replicated = 2 * V * d + (2 * o.model.layers + 1) * d;
  const std::int64_t want_bytes =
      o.model.layers * 8 * 4 * (P - 1) * (S / P) * d + 4 * 2 * replicated * (P - 1) / P + 4 * 2 * (P - 1);
  for (std::size_t s = 0; s < ref.size(); ++s) {
    EXPECT_NEAR(got[s].loss, ref[s].loss, kRtol * std::abs(ref[s].loss)) << "step " << s + 1 << " P=" << P;
    EXPECT_EQ(got[s].bytes_sent, want_bytes) << "step " << s + 1;
    EXPECT_EQ(got[s].strategy, "tp");
    EXPECT_GT(got[s].peak_rss_bytes, 0);
  }
  // The checkpoint holds full tensors: a single-process eval loads it, and eval --strategy tp
  // (P ranks, shards of it) gives the same perplexity and passes its own self-check.
  burst::lm::EvalOptions e;
  e.run = o.run;
  e.checkpoint = o.out_dir / "checkpoint.safetensors";
  e.verify_books = 3;
  const auto dist = burst::lm::run_eval(e, f.comm);
  e.run.engine = burst::lm::EngineKind::Local;
  const auto single = burst::lm::run_eval(e, f.self);
  EXPECT_TRUE(dist.at("verified").get<bool>()) << dist.dump();
  EXPECT_EQ(dist.at("strategy"), "tp");
  EXPECT_NEAR(dist.at("perplexity").get<double>(), single.at("perplexity").get<double>(),
              kRtol * single.at("perplexity").get<double>());
}

// Bad input is refused on every rank before any message: heads that do not split, and
// activation checkpointing (not implemented for tp).
TEST(LmExactness, TensorParallelRefusesModelsThatDoNotSplit) {
  Fixture f;
  auto o = tp_options(f, "bad");
  o.recompute = burst::lm::Model::Recompute::Mlp;
  EXPECT_THROW(burst::lm::run_train(o, f.comm), burst::Error);
  if (f.comm.size() > 1) {
    auto bad = tp_options(f, "bad_heads");
    bad.model.heads = bad.model.kv_heads = 5;
    EXPECT_THROW(burst::lm::run_train(bad, f.comm), burst::Error);
  }
}

// `--strategy tp --dtype bf16`: the same bounds as the context-parallel bf16 tests below — every
// step's loss within 2 % of tp's fp32 run, every attention pass on bf16 views, the numbers
// changed by bf16 rounding — and the bytes per step exactly Megatron-SP's with the all-gathers in
// bf16 and the reduce-scatters in fp32: per layer and step 4 all-gathers (2 forward before the
// column-parallel GEMMs, 2 backward of the reduce-scatters: values that are bf16 either way) at
// 2 bytes and 4 reduce-scatters (2 forward after the row-parallel GEMMs, 2 backward of the
// all-gathers: partial sums, summed in fp32) at 4 bytes, each (P−1)·S/P·d values: 0.75× of fp32's
// collectives; the gradient all-reduce stays fp32. The eval of its checkpoint in bf16 passes
// its self-check within 1 % of the fp32 eval's perplexity.
TEST(LmExactness, TensorParallelBf16TracksFp32WithBf16AllGathers) {
  Fixture f;
  const int P = f.comm.size();
  auto o = tp_options(f, "tp_fp32");
  const auto ref = burst::lm::run_train(o, f.comm);
  o.out_dir = f.root / "tp_bf16";
  o.run.dtype = burst::DType::BF16;
  const auto got = burst::lm::run_train(o, f.comm);
  ASSERT_EQ(got.size(), ref.size());
  const std::int64_t S = burst::lm::padded_length(o.seq_len, P), d = o.model.d_model, V = 48;
  const std::int64_t replicated = 2 * V * d + (2 * o.model.layers + 1) * d;
  const std::int64_t grads = 4 * 2 * replicated * (P - 1) / P + 4 * 2 * (P - 1);
  const std::int64_t rows = (P - 1) * (S / P) * d;  // values per rank in one collective
  double max_rel = 0;
  for (std::size_t s = 0; s < ref.size(); ++s) {
    const double rel = std::abs(got[s].loss - ref[s].loss) / std::abs(ref[s].loss);
    max_rel = std::max(max_rel, rel);
    EXPECT_LE(rel, 0.02) << "step " << s + 1 << " P=" << P;
    EXPECT_EQ(got[s].attention_dtype, "bf16");
    EXPECT_EQ(ref[s].attention_dtype, "f32");
    EXPECT_EQ(ref[s].bytes_sent, o.model.layers * (4 * 4 + 4 * 4) * rows + grads) << "step " << s + 1;
    EXPECT_EQ(got[s].bytes_sent, o.model.layers * (4 * 2 + 4 * 4) * rows + grads) << "step " << s + 1;
  }
  EXPECT_GT(max_rel, kRtol);  // bf16 rounding changed the numbers
  burst::lm::EvalOptions e;
  e.run = o.run;
  e.checkpoint = o.out_dir / "checkpoint.safetensors";
  e.verify_books = 3;
  const auto p16 = burst::lm::run_eval(e, f.comm);
  e.run.dtype = burst::DType::F32;
  const auto p32 = burst::lm::run_eval(e, f.comm);
  EXPECT_TRUE(p16.at("verified").get<bool>()) << p16.dump();
  EXPECT_EQ(p16.at("attention_dtype"), "bf16");
  EXPECT_EQ(p16.at("strategy"), "tp");
  const double x16 = p16.at("perplexity").get<double>(), x32 = p32.at("perplexity").get<double>();
  EXPECT_LT(std::abs(x16 - x32), 0.01 * x32);
}

// `--dtype bf16` (attention through burst on bf16 Q, K, V, dO; bf16 GEMMs; fp32 master weights)
// tracks the fp32 run: every step's loss within 2 % of fp32's (the bound for the real
// model's 40 steps; these 4 steps on a tiny model stay far inside it). It really ran bf16: every
// attention pass of every step took bf16 views (EngineTotals), the losses differ from fp32's
// by more than fp32's own rank-to-rank noise (1e-5 above), and for P > 1 each step sent fewer
// bytes (burst moves Q, K, V, dO in 16 bits; the gradient all-reduce is fp32 in both).
TEST(LmExactness, Bf16TrainingTracksFp32AndRunsBf16Attention) {
  Fixture f;
  auto o = f.train_options("fp32");
  const auto ref = burst::lm::run_train(o, f.comm);
  o.out_dir = f.root / "bf16";
  o.run.dtype = burst::DType::BF16;
  const auto got = burst::lm::run_train(o, f.comm);
  ASSERT_EQ(got.size(), ref.size());
  double max_rel = 0;
  for (std::size_t s = 0; s < ref.size(); ++s) {
    const double rel = std::abs(got[s].loss - ref[s].loss) / std::abs(ref[s].loss);
    max_rel = std::max(max_rel, rel);
    EXPECT_LE(rel, 0.02) << "step " << s + 1 << " P=" << f.comm.size();
    EXPECT_EQ(got[s].attention_dtype, "bf16");
    EXPECT_EQ(ref[s].attention_dtype, "f32");
    if (f.comm.size() > 1) { EXPECT_LT(got[s].bytes_sent, ref[s].bytes_sent) << "step " << s + 1; }
  }
  EXPECT_GT(max_rel, kRtol);  // bf16 rounding changed the numbers
  // An fp32 checkpoint does not resume as bf16 (another trajectory): refused on every rank.
  o.out_dir = f.root / "fp32";
  o.resume = true;
  o.steps = 5;
  EXPECT_THROW(burst::lm::run_train(o, f.comm), burst::Error);
}

// `burst-lm eval --dtype bf16` of an fp32 checkpoint: perplexity within 1 % of the fp32 eval
// (the bound for the whole KJV), every attention pass on bf16 views (EngineTotals), and
// its self-check (sampled books recomputed on one rank, bf16 too) still passes.
TEST(LmExactness, Bf16EvalTracksFp32AndVerifiesItself) {
  Fixture f;
  auto e = f.eval_options_after_training("eval_bf16");
  const auto fp32 = burst::lm::run_eval(e, f.comm);
  e.run.dtype = burst::DType::BF16;
  const auto bf16 = burst::lm::run_eval(e, f.comm);
  EXPECT_EQ(bf16.at("dtype"), "bf16");
  EXPECT_EQ(fp32.at("dtype"), "f32");
  EXPECT_TRUE(bf16.at("verified").get<bool>()) << bf16.dump();
  const double p32 = fp32.at("perplexity").get<double>(), p16 = bf16.at("perplexity").get<double>();
  EXPECT_LT(std::abs(p16 - p32), 0.01 * p32);
  EXPECT_NE(p16, p32);  // rounded somewhere (the tiny model is near uniform: the gap is ~1e-5)
  EXPECT_EQ(bf16.at("attention_dtype"), "bf16");  // every attention pass took bf16 views
  EXPECT_EQ(fp32.at("attention_dtype"), "f32");
}
