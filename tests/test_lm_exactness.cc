// Exactness of the distributed language model (MPI; run at 1..4 ranks): with the same seeds and
// data, `burst train` on P ranks gives the same loss at every step as the single-process run
// through the local kernel engine — for the burst and ring strategies on the contiguous, zigzag
// and striped layouts — and `burst eval` on P ranks (balanced layout) reproduces the
// single-process perplexity and passes its own self-check. Tiny model, synthetic corpus.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "burst/comm.h"
#include "lm/data.h"
#include "lm/engine_factory.h"
#include "lm/runtime.h"
#include "lm/train.h"

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
      std::mt19937 rng(11);
      std::vector<std::int32_t> tokens;
      std::vector<std::int64_t> offsets{0};
      for (int b = 0; b < 5; ++b) {
        const int len = 150 + 70 * b;
        std::int32_t t = b;
        for (int i = 0; i < len; ++i) {
          t = static_cast<std::int32_t>((t * 5 + 1 + static_cast<int>(rng() % 3)) % 48);
          tokens.push_back(t);
        }
        offsets.push_back(static_cast<std::int64_t>(tokens.size()));
      }
      burst::lm::write_corpus_cache(root / "data", tokens, {"A", "B", "C", "D", "E"}, offsets, 48);
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

TEST(LmExactness, EvalMatchesSingleProcessAndVerifiesItself) {
  Fixture f;
  auto o = f.train_options("eval");
  o.steps = 2;
  burst::lm::run_train(o, f.comm);
  burst::lm::EvalOptions e;
  e.run = o.run;
  e.run.dist.layout = burst::LayoutKind::Balanced;
  e.checkpoint = o.out_dir / "checkpoint.safetensors";
  e.verify_books = 3;
  const auto dist = burst::lm::run_eval(e, f.comm);
  e.run.engine = burst::lm::EngineKind::Local;
  const auto local = burst::lm::run_eval(e, f.self);
  EXPECT_TRUE(dist.at("verified").get<bool>()) << dist.dump();
  EXPECT_EQ(dist.at("tokens"), local.at("tokens"));
  EXPECT_NEAR(dist.at("perplexity").get<double>(), local.at("perplexity").get<double>(),
              kRtol * local.at("perplexity").get<double>());
  EXPECT_EQ(dist.at("ranks"), f.comm.size());
}
