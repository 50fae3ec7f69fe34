// apps/lm/kv_dump.cc — capture, key, save and load of a rank's K/V (kv_dump.h).
#include "kv_dump.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "burst/error.h"
#include "data.h"
#include "runtime.h"

namespace burst::lm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kKvFormat = "burst-lm-kv/1";

void zero_fill(const TensorView& t) {
  BURST_CHECK(t.is_contiguous() && t.dtype == DType::F32, Internal, "kv capture: output not contiguous f32");
  std::fill(t.f32(), t.f32() + t.numel(), 0.0f);
}

// Appends the rows of `t` [1, S_local, H_kv, D] (contiguous f32) whose index is in `rows`.
void append_rows(const TensorView& t, const std::vector<std::size_t>& rows, std::vector<float>& to) {
  BURST_CHECK(t.is_contiguous() && t.dtype == DType::F32, Internal, "kv capture: K/V not contiguous f32");
  const auto row = static_cast<std::size_t>(t.numel() / std::max<std::int64_t>(t.shape[1], 1));
  to.reserve(rows.size() * row);
  for (const std::size_t r : rows) to.insert(to.end(), t.f32() + r * row, t.f32() + (r + 1) * row);
}

}  // namespace

KvCaptureEngine::KvCaptureEngine(AttentionEngine& inner, std::int64_t n_real, int layers,
                                 bool skip_last_attention)
    : inner_(inner), n_real_(n_real), layers_(layers), skip_last_(skip_last_attention) {
  const auto& pos = inner_.positions();
  for (std::size_t i = 0; i < pos.size(); ++i)
    if (pos[i] < n_real_) {
      rows_.push_back(i);
      shard_.positions.push_back(pos[i]);
    }
}

void KvCaptureEngine::forward(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const TensorView& lse) {
  if (skip_last_ && layer_ + 1 == layers_) {
    zero_fill(out);
    zero_fill(lse);
  } else {
    inner_.forward(q, k, v, out, lse);
  }
  const Stopwatch sw;
  shard_.k.emplace_back();
  shard_.v.emplace_back();
  append_rows(k, rows_, shard_.k.back());
  append_rows(v, rows_, shard_.v.back());
  ++layer_;
  copy_seconds_ += sw.seconds();
}

void KvCaptureEngine::backward(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                               const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                               const TensorView&) {
  BURST_FAIL(Unsupported, "KvCaptureEngine is forward only");
}

json kv_shard_key(Model& model, const Corpus& corpus, std::int64_t n_ctx, std::int64_t S_padded,
                  const std::string& mask_kind, const RunOptions& run, int rank, int ranks) {
  std::uint64_t weights = 0xcbf29ce484222325ULL;
  for (const auto& t : model.parameters()) {
    const auto c = t.detach().contiguous();
    weights = fnv1a64(c.data_ptr<float>(), static_cast<std::size_t>(c.numel()) * sizeof(float), weights);
  }
  const ModelConfig& m = model.config();
  return json{{"format", kKvFormat},
              {"weights", hex64(weights)},
              {"data", hex64(corpus.checksum)},
              {"context_tokens", n_ctx},
              {"S_padded", S_padded},
              {"mask", mask_kind},
              {"ranks", ranks},
              {"rank", rank},
              {"strategy", to_string(run.dist.strategy)},
              {"layout", to_string(run.dist.layout)},
              {"engine", run.engine == EngineKind::Dist ? "dist" : "local"},
              {"threads", run.dist.num_threads},
              {"dtype", to_string(run.dtype)},
              {"layers", m.layers},
              {"kv_heads", m.kv_heads},
              {"head_dim", m.head_dim}};
}

fs::path kv_shard_path(const fs::path& dir, int rank, int ranks) {
  return dir / ("kv_rank" + std::to_string(rank) + "_of_" + std::to_string(ranks) + ".bin");
}

void save_kv_shard(const fs::path& path, const json& key, const KvShard& shard) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    BURST_CHECK(out, InvalidArgument, "cannot write K/V shard ", tmp.string());
    out << key.dump() << "\n";
    const auto n = static_cast<std::uint64_t>(shard.positions.size());
    const auto layers = static_cast<std::uint64_t>(shard.k.size());
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(reinterpret_cast<const char*>(&layers), sizeof layers);
    out.write(reinterpret_cast<const char*>(shard.positions.data()),
              static_cast<std::streamsize>(n * sizeof(std::int64_t)));
    for (std::size_t l = 0; l < shard.k.size(); ++l)
      for (const auto* a : {&shard.k[l], &shard.v[l]}) {
        const auto bytes = static_cast<std::uint64_t>(a->size() * sizeof(float));
        out.write(reinterpret_cast<const char*>(&bytes), sizeof bytes);
        out.write(reinterpret_cast<const char*>(a->data()), static_cast<std::streamsize>(bytes));
      }
    BURST_CHECK(out.good(), InvalidArgument, "cannot write K/V shard ", tmp.string());
  }
  fs::rename(tmp, path);
}

bool load_kv_shard(const fs::path& path, const json& key, KvShard& shard, std::string& why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = "no file " + path.string();
    return false;
  }
  std::string line;
  std::getline(in, line);
  const json have = json::parse(line, nullptr, false);
  if (have.is_discarded() || !have.is_object()) {
    why = path.string() + " has no key line";
    return false;
  }
  if (have != key) {
    why = path.string() + " holds another context:";
    for (const auto& [name, want] : key.items())
      if (!have.contains(name) || have.at(name) != want)
        why += " " + name + " " + (have.contains(name) ? have.at(name).dump() : "absent") + " (want " +
               want.dump() + ")";
    return false;
  }
  std::uint64_t n = 0, layers = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  in.read(reinterpret_cast<char*>(&layers), sizeof layers);
  const auto want_layers = key.at("layers").get<std::uint64_t>();
  const auto row = key.at("kv_heads").get<std::uint64_t>() * key.at("head_dim").get<std::uint64_t>();
  if (!in || layers != want_layers || n > (std::uint64_t{1} << 40)) {
    why = path.string() + ": bad sizes";
    return false;
  }
  KvShard s;
  s.positions.resize(n);
  in.read(reinterpret_cast<char*>(s.positions.data()),
          static_cast<std::streamsize>(n * sizeof(std::int64_t)));
  for (std::uint64_t l = 0; l < layers; ++l) {
    s.k.emplace_back();
    s.v.emplace_back();
    for (auto* a : {&s.k.back(), &s.v.back()}) {
      std::uint64_t bytes = 0;
      in.read(reinterpret_cast<char*>(&bytes), sizeof bytes);
      if (!in || bytes != n * row * sizeof(float)) {
        why = path.string() + ": truncated or inconsistent";
        return false;
      }
      a->resize(n * row);
      in.read(reinterpret_cast<char*>(a->data()), static_cast<std::streamsize>(bytes));
    }
  }
  if (!in || !std::is_sorted(s.positions.begin(), s.positions.end())) {
    why = path.string() + ": truncated or positions out of order";
    return false;
  }
  shard = std::move(s);
  return true;
}

std::uint64_t kv_shard_fingerprint(const KvShard& shard) {
  // FNV-1a over 64-bit words (8× fewer steps than over bytes; a fingerprint, not a checksum).
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto mix = [&h](const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = (h ^ w) * 0x100000001b3ULL;
    }
    for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  };
  mix(shard.positions.data(), shard.positions.size() * sizeof(std::int64_t));
  for (std::size_t l = 0; l < shard.k.size(); ++l) {
    mix(shard.k[l].data(), shard.k[l].size() * sizeof(float));
    mix(shard.v[l].data(), shard.v[l].size() * sizeof(float));
  }
  return h;
}

}  // namespace burst::lm
