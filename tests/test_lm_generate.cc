// `burst-lm generate` (apps/lm/generate.h) at 1..4 ranks on a tiny model and a synthetic corpus:
// the distributed run (prefill through DistAttention into sharded DistKVCaches, last layer's
// attention skipped, distributed decode) passes its own single-rank self-check — recomputed K/V
// of whole documents, one crossing ranks, and the logits of the first decode steps over the whole
// cache — and greedy decoding produces the same continuation as the one-process run; the K/V
// that `burst eval --save-kv` keeps, loaded by `--kv-from`, give bitwise the prefill's cache and
// the same continuation, and shards of another context are refused (the prefill runs instead).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "burst/comm.h"
#include "lm/data.h"
#include "lm/generate.h"
#include "lm/kv_dump.h"
#include "lm/train.h"
#include "lm_test_corpus.h"

namespace fs = std::filesystem;

namespace {

struct Fixture {
  burst::Communicator comm = burst::Communicator::world();
  burst::Communicator self = comm.split(comm.rank(), 0);
  fs::path root;

  Fixture() {
    const std::int64_t id = comm.all_reduce_max(static_cast<std::int64_t>(::getpid()));
    root = fs::temp_directory_path() / ("burst_test_lm_generate_" + std::to_string(id));
    if (comm.rank() == 0) {
      fs::remove_all(root);
      burst::test::write_markov_corpus(root / "data", 5, 5, 120, 50);
      // A 48-piece vocabulary of single characters (Vocab reads spm.vocab: "piece\tscore").
      std::ofstream vocab(root / "data" / "spm.vocab");
      vocab << "<unk>\t0\n\xe2\x96\x81\t0\n";
      for (int i = 0; i < 26; ++i) vocab << static_cast<char>('a' + i) << "\t0\n";
      for (int i = 0; i < 20; ++i) vocab << static_cast<char>('A' + i) << "\t0\n";
    }
    comm.barrier();
  }
  ~Fixture() {
    comm.barrier();
    if (comm.rank() == 0) fs::remove_all(root);
  }
};

burst::lm::TrainOptions tiny_training(const Fixture& f) {
  burst::lm::TrainOptions t;
  t.run.data_dir = f.root / "data";
  t.run.verbose = false;
  t.run.head_chunk = 40;
  t.run.dist.num_threads = 1;
  t.out_dir = f.root / "train";
  t.model.d_model = 32;
  t.model.layers = 2;
  t.model.heads = 4;
  t.model.kv_heads = 2;
  t.model.head_dim = 8;
  t.model.ffn_hidden = 48;
  t.steps = 2;
  t.seq_len = 240;
  t.lr = 1e-2;
  t.warmup_steps = 1;
  t.plot = false;
  t.resume = false;
  return t;
}

// Trains the tiny model (collective) and returns greedy generation options for its checkpoint.
burst::lm::GenerateOptions trained_generation(const Fixture& f) {
  const burst::lm::TrainOptions t = tiny_training(f);
  burst::lm::run_train(t, f.comm);
  burst::lm::GenerateOptions g;
  g.run = t.run;
  g.checkpoint = t.out_dir / "checkpoint.safetensors";
  g.prompt = "abc";
  g.max_new_tokens = 5;
  g.temperature = 0;  // greedy: the continuation is a function of the logits alone
  g.verify_tokens = 3;
  g.chunk_tokens = 64;  // several chunks per rank: the split-KV merge is exercised
  return g;
}

TEST(LmGenerate, DistributedRunVerifiesItselfAndMatchesOneProcess) {
  Fixture f;
  burst::lm::GenerateOptions g = trained_generation(f);
  for (auto layout : {burst::LayoutKind::Zigzag, burst::LayoutKind::Striped}) {
    g.run.dist.layout = layout;
    const auto dist = burst::lm::run_generate(g, f.comm);
    EXPECT_TRUE(dist.at("verified").get<bool>()) << dist.dump();
    EXPECT_LE(dist.at("verify_max_rel_err").get<double>(), 1e-5);
    EXPECT_EQ(dist.at("verify_steps").get<int>(), 3);
    EXPECT_EQ(dist.at("kv_source"), "prefill");
    if (f.comm.rank() == 0) {
      const auto& ranges = dist.at("verify_kv_ranges");
      ASSERT_FALSE(ranges.empty()) << dist.dump();
      if (f.comm.size() > 1) {  // one recomputed document crosses ranks
        bool crosses = false;
        for (const auto& r : ranges) crosses = crosses || r.at("ranks_holding").get<int>() > 1;
        EXPECT_TRUE(crosses) << ranges.dump();
      }
    }
    auto one = g;
    one.run.engine = burst::lm::EngineKind::Local;
    const auto local = burst::lm::run_generate(one, f.self);
    EXPECT_TRUE(local.at("verified").get<bool>()) << local.dump();
    EXPECT_EQ(dist.at("text"), local.at("text")) << burst::to_string(layout) << " P=" << f.comm.size();
  }
}

// eval --save-kv then generate --kv-from: the same cache bitwise (per-rank fingerprints of every
// layer's K/V and their positions), the same continuation (sampled at temperature 0.8 with a
// fixed seed, so any logit difference that moves a draw shows) and the self-check passes on the
// loaded cache. A dump of another context (one token shorter) is named and not used.
TEST(LmGenerate, EvalSavedKvEqualsPrefillBitwise) {
  Fixture f;
  burst::lm::GenerateOptions g = trained_generation(f);
  g.run.dist.layout = burst::LayoutKind::Balanced;  // eval's layout
  g.temperature = 0.8;
  g.seed = 3;
  burst::lm::EvalOptions e;
  e.run = g.run;
  e.checkpoint = g.checkpoint;
  e.verify_books = 1;
  e.save_kv = f.root / "kv";
  const auto ev = burst::lm::run_eval(e, f.comm);
  EXPECT_TRUE(ev.at("verified").get<bool>()) << ev.dump();
  EXPECT_TRUE(std::filesystem::exists(burst::lm::kv_shard_path(e.save_kv, f.comm.rank(), f.comm.size())));

  const auto fresh = burst::lm::run_generate(g, f.comm);
  g.kv_from = e.save_kv;
  const auto reused = burst::lm::run_generate(g, f.comm);
  EXPECT_EQ(fresh.at("kv_source"), "prefill");
  EXPECT_EQ(reused.at("kv_source"), "eval") << reused.at("kv_rejected");
  EXPECT_EQ(reused.at("kv_fingerprint"), fresh.at("kv_fingerprint"));
  EXPECT_EQ(reused.at("prefill_tokens"), ev.at("tokens"));
  EXPECT_EQ(reused.at("text"), fresh.at("text"));
  EXPECT_TRUE(fresh.at("verified").get<bool>()) << fresh.dump();
  EXPECT_TRUE(reused.at("verified").get<bool>()) << reused.dump();

  e.max_tokens = ev.at("tokens").get<std::int64_t>() - 1;  // another context: not reused
  burst::lm::run_eval(e, f.comm);
  const auto refused = burst::lm::run_generate(g, f.comm);
  EXPECT_EQ(refused.at("kv_source"), "prefill");
  EXPECT_NE(refused.at("kv_rejected").get<std::string>().find("context_tokens"), std::string::npos)
      << refused.at("kv_rejected");
  EXPECT_EQ(refused.at("kv_fingerprint"), fresh.at("kv_fingerprint"));
  EXPECT_EQ(refused.at("text"), fresh.at("text"));
}

// `--dtype bf16`: the KV cache stored in bf16. The run verifies itself against fp64 attention
// over the same rounded K/V (a cache that silently kept fp32 would differ from that oracle by
// ~2^-9 relative and fail the 1e-5 logits check); the cache against the fp32 recomputation is
// off by the rounding only (> 0, ≤ 2^-8 + verify_rtol); it holds and reads half the bytes of
// the fp32 cache for the same tokens; the bytes sent per token (fp32 partials) do not change.
TEST(LmGenerate, Bf16CacheVerifiesAgainstRoundedKvAndHalvesItsBytes) {
  Fixture f;
  burst::lm::GenerateOptions g = trained_generation(f);
  const auto f32 = burst::lm::run_generate(g, f.comm);
  g.run.dtype = burst::DType::BF16;
  const auto b16 = burst::lm::run_generate(g, f.comm);
  EXPECT_TRUE(f32.at("verified").get<bool>()) << f32.dump();
  EXPECT_TRUE(b16.at("verified").get<bool>()) << b16.dump();
  EXPECT_EQ(b16.at("kv_dtype"), "bf16");
  EXPECT_LE(b16.at("verify_max_rel_err").get<double>(), 1e-5);
  const double kv_err = b16.at("verify_kv_max_rel_err").get<double>();
  EXPECT_GT(kv_err, 1e-5) << "the cache did not round";
  EXPECT_LE(kv_err, 1.0 / 256 + 1e-5);
  EXPECT_EQ(2 * b16.at("kv_bytes_per_rank").get<std::int64_t>(),
            f32.at("kv_bytes_per_rank").get<std::int64_t>());
  EXPECT_EQ(2 * b16.at("kv_bytes_read_per_token").get<std::int64_t>(),
            f32.at("kv_bytes_read_per_token").get<std::int64_t>());
  EXPECT_GT(b16.at("kv_bytes_read_per_token").get<std::int64_t>(), 0);
  EXPECT_EQ(b16.at("bytes_per_token"), f32.at("bytes_per_token"));
}

}  // namespace
