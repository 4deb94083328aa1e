#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "core/tensor.h"
#include "formats/safetensors.h"

namespace mt {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; so must the host be");

void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata, uint32_t* crc) {
  // Header first: validate every tensor before creating any file.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorRef& t : tensors) {
    MT_REQUIRE(!t.name.empty(), ConfigError, "safetensors '", path, "': a tensor has an empty name");
    MT_REQUIRE(t.name != "__metadata__", ConfigError, "safetensors '", path,
               "': '__metadata__' is reserved and cannot name a tensor");
    MT_REQUIRE(seen.insert(t.name).second, ConfigError, "safetensors '", path, "': tensor name '", t.name,
               "' appears twice");
    for (int64_t d : t.shape) {
      MT_REQUIRE(d >= 0, ConfigError, "safetensors '", path, "': tensor '", t.name,
                 "' has negative dimension ", d);
    }
    const uint64_t bytes = static_cast<uint64_t>(numel_of(t.shape)) * sizeof(float);
    MT_REQUIRE(bytes == 0 || t.data != nullptr, ConfigError, "safetensors '", path, "': tensor '", t.name,
               "' has no data");
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad so that the data buffer starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile file(path);
  uint32_t sum = 0;
  auto put = [&](const void* data, size_t bytes) {
    file.write(data, bytes);
    if (crc != nullptr) sum = crc32c(data, bytes, sum);
  };
  const uint64_t header_len = text.size();
  put(&header_len, sizeof(header_len));
  put(text.data(), text.size());
  for (const TensorRef& t : tensors) {
    put(t.data, static_cast<size_t>(numel_of(t.shape)) * sizeof(float));
  }
  file.commit();
  if (crc != nullptr) *crc = sum;
}

}  // namespace mt
