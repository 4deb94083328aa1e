// The key/value cache of generation: for every layer and sequence of a
// batch, the keys and values of the tokens seen so far, so that each new
// token attends to them without recomputing the prefix (docs/MODEL.md,
// "Generation").
//
// Layout per (layer, sequence): [slots, kv_heads·head_dim], token-major,
// the stride attention_forward reads. Element type f32, or int8 with one
// float scale per (token, kv head): x ≈ scale · q, scale = max|x| / 127.
//
// Sharded by position (context parallelism, docs/MODEL.md "Generation"): with
// `shards` > 1 this cache keeps only the positions p with p mod shards ==
// shard, position p in slot p / shards, so slots = ceil(capacity / shards);
// the shards together hold every position once. Lengths stay global.
// Bytes: 2 · layers · batch · slots · kv_heads · head_dim · 4 (f32), or
// 2 · layers · batch · slots · kv_heads · (head_dim + 4) (int8).
//
// On the run's device (core/device.h): an f32 cache lives there (written by
// device copies, read by the attention kernels); the int8 cache quantises on
// the host and needs the host device (Decoder refuses it elsewhere by name).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/memory.h"

namespace mt {

enum class KvDtype { f32, int8 };
KvDtype parse_kv_dtype(const std::string& name);  // "f32" | "int8"; ConfigError otherwise
const char* kv_dtype_name(KvDtype t);

class KvCache {
 public:
  KvCache(int64_t layers, int64_t batch, int64_t capacity, int64_t kv_heads, int64_t head_dim,
          KvDtype dtype = KvDtype::f32, int shards = 1, int shard = 0);

  int64_t capacity() const { return cap_; }  // positions, over all shards
  int64_t slots() const { return slots_; }   // positions kept here
  int shards() const { return shards_; }
  // How many of the positions [0, n) this shard keeps, and the position of its slot j.
  int64_t local_count(int64_t n) const { return count_in_shard(n, shard_); }
  // How many of the positions [0, n) shard s keeps (any shard: the ring prefill, decoder.h).
  int64_t count_in_shard(int64_t n, int s) const { return n > s ? (n - s + shards_ - 1) / shards_ : 0; }
  int64_t position_of(int64_t j) const { return j * shards_ + shard_; }
  int64_t batch() const { return batch_; }
  int64_t layers() const { return layers_; }
  int64_t row() const { return kv_ * dim_; }  // floats per token
  KvDtype dtype() const { return dtype_; }
  int64_t bytes() const;  // what the cache holds, by the formula above
  static int64_t bytes_for(int64_t layers, int64_t batch, int64_t slots, int64_t kv_heads, int64_t head_dim,
                           KvDtype dtype);

  // Tokens cached for sequence s; advance() adds n after every layer wrote them.
  int64_t length(int64_t s) const { return len_[static_cast<size_t>(s)]; }
  void advance(int64_t s, int64_t n);
  // ConfigError unless sequence s has room for n more tokens (advance's rule).
  void check_room(int64_t s, int64_t n) const;

  // Stores n tokens' keys and values (rows `stride` floats apart) of layer l,
  // sequence s, at positions [at, at + n): those this shard keeps.
  void write(int64_t l, int64_t s, int64_t at, int64_t n, const float* k, const float* v, int64_t stride);
  // The keys / values this shard keeps of (l, s)'s positions [0, n), as floats
  // [local_count(n), row()]: the storage itself (f32), or dequantised into
  // `scratch` (int8).
  const float* keys(int64_t l, int64_t s, int64_t n, std::vector<float>& scratch) const;
  const float* values(int64_t l, int64_t s, int64_t n, std::vector<float>& scratch) const;
  // n rows of keys or values (`stride` floats apart) as keys()/values() would
  // return them once stored: unchanged (f32), quantised and dequantised (int8).
  void round_trip(float* x, int64_t n, int64_t stride) const;

 private:
  size_t base(int64_t l, int64_t s) const { return static_cast<size_t>(((l * batch_ + s) * slots_) * row()); }
  float* f32(int which) const { return f32_dev_[which]; }
  void store(int which, int64_t l, int64_t s, int64_t slot, const float* x);
  const float* load(int which, int64_t l, int64_t s, int64_t n, std::vector<float>& scratch) const;

  int64_t layers_, batch_, cap_, kv_, dim_;
  KvDtype dtype_;
  int shards_, shard_;
  int64_t slots_;
  // Charged to MemKind::kv_cache, exactly bytes() in all.
  TrackedVector<float, MemKind::kv_cache> f32_[2];    // keys, values (f32) on the host device
  DeviceBuffer f32_buf_[2];                           // keys, values (f32) on another run device
  float* f32_dev_[2] = {nullptr, nullptr};            // where the f32 keys and values are
  TrackedVector<int8_t, MemKind::kv_cache> q8_[2];    // keys, values (int8)
  TrackedVector<float, MemKind::kv_cache> scale_[2];  // [layers, batch, slots, kv_heads] (int8)
  std::vector<int64_t> len_;
};

}  // namespace mt
