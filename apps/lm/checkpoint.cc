// apps/lm/checkpoint.cc — save / verify / load (safetensors layout).
#include "checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "burst/error.h"
#include "data.h"

namespace burst::lm {
namespace fs = std::filesystem;
namespace {

constexpr const char* kCheckpointFormat = "burst-lm/safetensors-1";

// The checksum of the "burst" metadata text followed by the data section.
std::uint64_t checksum(const std::string& meta, const char* data, std::size_t bytes) {
  return fnv1a64(data, bytes, fnv1a64(meta.data(), meta.size()));
}

}  // namespace

void save_checkpoint(const fs::path& path, const Checkpoint& ckpt) {
  const std::string meta = ckpt.header.dump();
  nlohmann::ordered_json header;
  std::set<std::string> names;
  std::size_t data_bytes = 0;
  for (const auto& [name, t] : ckpt.tensors) {
    BURST_CHECK(t.scalar_type() == torch::kFloat32, InvalidArgument, "checkpoint tensor ", name,
                " is not fp32");
    BURST_CHECK(name != "__metadata__" && names.insert(name).second, InvalidArgument,
                "checkpoint tensor name '", name, "' is reserved or repeated");
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * sizeof(float);
    header[name] = {
        {"dtype", "F32"}, {"shape", t.sizes().vec()}, {"data_offsets", {data_bytes, data_bytes + bytes}}};
    data_bytes += bytes;
  }
  std::string data;
  data.reserve(data_bytes);
  for (const auto& [name, t] : ckpt.tensors) {
    const auto c = t.detach().contiguous();
    data.append(reinterpret_cast<const char*>(c.data_ptr<float>()),
                static_cast<std::size_t>(c.numel()) * sizeof(float));
  }
  header["__metadata__"] = {{"format", kCheckpointFormat},
                            {"burst", meta},
                            {"checksum", hex64(checksum(meta, data.data(), data.size()))}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const auto n = static_cast<std::uint64_t>(text.size());
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    BURST_CHECK(out, InvalidArgument, "cannot write checkpoint ", tmp.string());
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);  // little-endian
    out.write(len, sizeof len);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    BURST_CHECK(out.good(), InvalidArgument, "short write of checkpoint ", tmp.string());
  }
  fs::rename(tmp, path);
}

namespace {

// The header and tensors of a file whose header length n is in range (load_checkpoint).
Checkpoint parse_checkpoint(const std::string& buf, std::uint64_t n, const std::string& bad) {
  const nlohmann::json header = nlohmann::json::parse(buf.substr(8, n));
  BURST_CHECK(header.is_object() && header.contains("__metadata__") &&
                  header["__metadata__"].value("format", "") == kCheckpointFormat,
              InvalidArgument, bad, "not a burst LM checkpoint (no __metadata__.format = ", kCheckpointFormat,
              ")");
  const nlohmann::json& meta = header.at("__metadata__");
  const char* data = buf.data() + 8 + n;
  const std::size_t data_bytes = buf.size() - 8 - n;
  // Tensors in data order; their byte ranges must tile the data section exactly.
  std::vector<std::pair<std::size_t, std::string>> order;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__")
      order.emplace_back(it.value().at("data_offsets").at(0).get<std::size_t>(), it.key());
  std::sort(order.begin(), order.end());
  Checkpoint ckpt;
  std::size_t off = 0;
  for (const auto& [begin, name] : order) {
    const auto& t = header.at(name);
    BURST_CHECK(t.value("dtype", "") == "F32", InvalidArgument, bad, "tensor ", name, " has dtype ",
                t.value("dtype", "?"), ", this build reads F32");
    const auto shape = t.at("shape").get<std::vector<std::int64_t>>();
    const auto end = t.at("data_offsets").at(1).get<std::size_t>();
    std::size_t numel = 1;
    for (const auto dim : shape) {
      BURST_CHECK(dim >= 0 && (dim == 0 || numel <= data_bytes / static_cast<std::size_t>(dim)),
                  InvalidArgument, bad, "tensor ", name, " has a bad shape");
      numel *= static_cast<std::size_t>(dim);
    }
    const std::size_t bytes = numel * sizeof(float);
    BURST_CHECK(begin == off && end == begin + bytes && end <= data_bytes, InvalidArgument, bad, "tensor ",
                name, " spans bytes [", begin, ", ", end, ") of ", data_bytes, ", expected [", off, ", ",
                off + bytes, ")");
    torch::Tensor x = torch::empty(shape);
    std::memcpy(x.data_ptr<float>(), data + begin, bytes);
    off = end;
    ckpt.tensors.emplace_back(name, x);
  }
  BURST_CHECK(off == data_bytes, InvalidArgument, bad, data_bytes - off, " trailing bytes");
  const std::string text = meta.at("burst").get<std::string>();
  const std::string want = meta.value("checksum", ""), have = hex64(checksum(text, data, data_bytes));
  BURST_CHECK(want == have, InvalidArgument, bad, "checksum mismatch (stored ", want, ", computed ", have,
              ") — the file is damaged");
  ckpt.header = nlohmann::json::parse(text);
  return ckpt;
}

}  // namespace

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
  BURST_CHECK(buf.size() >= 8, InvalidArgument, bad, "only ", buf.size(), " bytes");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<std::uint64_t>(static_cast<unsigned char>(buf[static_cast<std::size_t>(i)])) << (8 * i);
  BURST_CHECK(n <= buf.size() - 8, InvalidArgument, bad, "header length ", n, " past the end of ", buf.size(),
              " bytes (not a safetensors file, or truncated)");
  try {
    return parse_checkpoint(buf, n, bad);
  } catch (const nlohmann::json::exception& e) {  // malformed header: a field missing or mistyped
    BURST_FAIL(InvalidArgument, bad, "bad header (", e.what(), ")");
  }
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
