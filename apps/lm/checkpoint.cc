// apps/lm/checkpoint.cc — save / verify / load.
#include "checkpoint.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "burst/error.h"
#include "data.h"

namespace burst::lm {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'B', 'U', 'R', 'S', 'T', 'L', 'M', '\0'};
constexpr std::uint32_t kVersion = 1;

template <typename T>
void put(std::string& buf, const T& v) {
  buf.append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

void save_checkpoint(const fs::path& path, const Checkpoint& ckpt) {
  nlohmann::json header = ckpt.header;
  header["tensors"] = nlohmann::json::array();
  std::size_t data_bytes = 0;
  for (const auto& [name, t] : ckpt.tensors) {
    BURST_CHECK(t.scalar_type() == torch::kFloat32, InvalidArgument, "checkpoint tensor ", name, " is not fp32");
    header["tensors"].push_back({{"name", name}, {"shape", t.sizes().vec()}});
    data_bytes += static_cast<std::size_t>(t.numel()) * sizeof(float);
  }
  const std::string text = header.dump();
  std::string buf;
  buf.reserve(32 + text.size() + data_bytes);
  buf.append(kMagic, sizeof kMagic);
  put(buf, kVersion);
  put(buf, static_cast<std::uint64_t>(text.size()));
  buf += text;
  for (const auto& [name, t] : ckpt.tensors) {
    const auto c = t.detach().contiguous();
    buf.append(reinterpret_cast<const char*>(c.data_ptr<float>()), static_cast<std::size_t>(c.numel()) * sizeof(float));
  }
  put(buf, fnv1a64(buf.data(), buf.size()));
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    BURST_CHECK(out, InvalidArgument, "cannot write checkpoint ", tmp.string());
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    BURST_CHECK(out.good(), InvalidArgument, "short write of checkpoint ", tmp.string());
  }
  fs::rename(tmp, path);
}

Checkpoint load_checkpoint(const fs::path& path) {
  BURST_CHECK(fs::exists(path), InvalidArgument, "checkpoint ", path.string(),
              " does not exist (train first: `burst train --out DIR`)");
  std::string buf;
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    buf = os.str();
  }
  const std::string bad = "corrupt checkpoint " + path.string() + ": ";
  constexpr std::size_t kFixed = sizeof kMagic + sizeof(std::uint32_t) + sizeof(std::uint64_t);
  BURST_CHECK(buf.size() >= kFixed + sizeof(std::uint64_t), InvalidArgument, bad, "only ", buf.size(), " bytes");
  BURST_CHECK(std::memcmp(buf.data(), kMagic, sizeof kMagic) == 0, InvalidArgument, bad,
              "wrong magic (not a burst LM checkpoint)");
  std::uint32_t version = 0;
  std::uint64_t header_len = 0, stored = 0;
  std::memcpy(&version, buf.data() + sizeof kMagic, sizeof version);
  std::memcpy(&header_len, buf.data() + sizeof kMagic + sizeof version, sizeof header_len);
  BURST_CHECK(version == kVersion, InvalidArgument, bad, "format version ", version, ", this build reads ", kVersion);
  const std::size_t body = buf.size() - sizeof(std::uint64_t);
  std::memcpy(&stored, buf.data() + body, sizeof stored);
  const std::uint64_t actual = fnv1a64(buf.data(), body);
  BURST_CHECK(stored == actual, InvalidArgument, bad, "checksum mismatch (stored ", stored, ", computed ",
              actual, ") — the file is truncated or damaged");
  BURST_CHECK(kFixed + header_len <= body, InvalidArgument, bad, "header length ", header_len, " past the end");
  Checkpoint ckpt;
  ckpt.header = nlohmann::json::parse(buf.substr(kFixed, header_len));
  std::size_t off = kFixed + header_len;
  for (const auto& t : ckpt.header.at("tensors")) {
    const auto shape = t.at("shape").get<std::vector<std::int64_t>>();
    torch::Tensor x = torch::empty(shape);
    const std::size_t bytes = static_cast<std::size_t>(x.numel()) * sizeof(float);
    BURST_CHECK(off + bytes <= body, InvalidArgument, bad, "tensor ", t.at("name").get<std::string>(), " past the end");
    std::memcpy(x.data_ptr<float>(), buf.data() + off, bytes);
    off += bytes;
    ckpt.tensors.emplace_back(t.at("name").get<std::string>(), x);
  }
  BURST_CHECK(off == body, InvalidArgument, bad, body - off, " trailing bytes");
  ckpt.header.erase("tensors");
  return ckpt;
}

torch::Tensor checkpoint_tensor(const Checkpoint& ckpt, const std::string& name,
                                const std::vector<std::int64_t>& shape) {
  for (const auto& [n, t] : ckpt.tensors) {
    if (n != name) continue;
    BURST_CHECK(t.sizes().vec() == shape, InvalidArgument, "checkpoint tensor ", name, " has shape ",
                t.sizes(), ", the model wants ", torch::IntArrayRef(shape));
    return t;
  }
  BURST_FAIL(InvalidArgument, "checkpoint has no tensor named ", name, " (mismatched model)");
}

}  // namespace burst::lm
