#include "infer/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mt {

KvDtype parse_kv_dtype(const std::string& name) {
  if (name == "f32") return KvDtype::f32;
  if (name == "int8") return KvDtype::int8;
  MT_THROW(ConfigError, "--kv-cache '", name, "' must be f32 or int8");
}

const char* kv_dtype_name(KvDtype t) {
  return t == KvDtype::f32 ? "f32" : "int8";
}

KvCache::KvCache(int64_t layers, int64_t batch, int64_t capacity, int64_t kv_heads, int64_t head_dim,
                 KvDtype dtype, int shards, int shard)
    : layers_(layers),
      batch_(batch),
      cap_(capacity),
      kv_(kv_heads),
      dim_(head_dim),
      dtype_(dtype),
      shards_(shards),
      shard_(shard),
      slots_(shards > 0 ? (capacity + shards - 1) / shards : 0) {
  MT_REQUIRE(layers > 0 && batch > 0 && capacity > 0 && kv_heads > 0 && head_dim > 0, ConfigError,
             "KV cache sizes must be positive (layers ", layers, ", batch ", batch, ", capacity ", capacity,
             ", kv heads ", kv_heads, ", head_dim ", head_dim, ")");
  MT_REQUIRE(shards >= 1 && shard >= 0 && shard < shards, ConfigError, "KV cache shard ", shard, " of ",
             shards, " does not exist");
  const size_t n = static_cast<size_t>(layers * batch * slots_ * row());
  const bool host = run_allocator().device() == kHost;
  for (int w = 0; w < 2; ++w) {
    if (dtype == KvDtype::f32 && host) {
      f32_[w].assign(n, 0.0f);
      f32_dev_[w] = f32_[w].data();
    } else if (dtype == KvDtype::f32) {
      f32_buf_[w] = DeviceBuffer(run_allocator(), static_cast<int64_t>(n * sizeof(float)), MemKind::kv_cache);
      f32_dev_[w] = static_cast<float*>(f32_buf_[w].data());
    } else {
      q8_[w].assign(n, 0);
      scale_[w].assign(static_cast<size_t>(layers * batch * slots_ * kv_heads), 0.0f);
    }
  }
  len_.assign(static_cast<size_t>(batch), 0);
}

int64_t KvCache::bytes_for(int64_t layers, int64_t batch, int64_t slots, int64_t kv_heads, int64_t head_dim,
                           KvDtype dtype) {
  const int64_t per = dtype == KvDtype::f32 ? head_dim * 4 : head_dim + 4;
  return 2 * layers * batch * slots * kv_heads * per;
}

int64_t KvCache::bytes() const {
  return bytes_for(layers_, batch_, slots_, kv_, dim_, dtype_);
}

void KvCache::check_room(int64_t s, int64_t n) const {
  const int64_t len = len_[static_cast<size_t>(s)];
  MT_REQUIRE(len + n <= cap_, ConfigError, "sequence ", s, " would hold ", len + n,
             " tokens but the KV cache has room for ", cap_);
}

void KvCache::advance(int64_t s, int64_t n) {
  check_room(s, n);
  len_[static_cast<size_t>(s)] += n;
}

void KvCache::write(int64_t l, int64_t s, int64_t at, int64_t n, const float* k, const float* v,
                    int64_t stride) {
  MT_REQUIRE(at >= 0 && at + n <= cap_, ConfigError, "positions [", at, ", ", at + n,
             ") are outside the KV cache's ", cap_);
  for (int64_t t = 0; t < n; ++t) {
    if ((at + t) % shards_ != shard_) continue;
    store(0, l, s, (at + t) / shards_, k + t * stride);
    store(1, l, s, (at + t) / shards_, v + t * stride);
  }
}

namespace {
// int8: one scale per (token, kv head), symmetric, round to nearest.
float quantise_head(int8_t* dst, const float* src, int64_t dim) {
  float amax = 0.0f;
  for (int64_t i = 0; i < dim; ++i)
    amax = std::max(amax, std::fabs(src[i]));
  const float scale = amax > 0 ? amax / 127.0f : 1.0f;
  for (int64_t i = 0; i < dim; ++i)
    dst[i] = static_cast<int8_t>(std::lrint(std::clamp(src[i] / scale, -127.0f, 127.0f)));
  return scale;
}
}  // namespace

void KvCache::store(int w, int64_t l, int64_t s, int64_t slot, const float* x) {
  const int64_t R = row();
  if (dtype_ == KvDtype::f32) {
    copy_bytes(f32(w) + base(l, s) + static_cast<size_t>(slot * R), x, R * int64_t{sizeof(float)});
    return;
  }
  for (int64_t h = 0; h < kv_; ++h) {
    int8_t* dst = q8_[w].data() + base(l, s) + static_cast<size_t>(slot * R + h * dim_);
    scale_[w][static_cast<size_t>(((l * batch_ + s) * slots_ + slot) * kv_ + h)] =
        quantise_head(dst, x + h * dim_, dim_);
  }
}

void KvCache::round_trip(float* x, int64_t n, int64_t stride) const {
  if (dtype_ == KvDtype::f32) return;
  std::vector<int8_t> q(static_cast<size_t>(dim_));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < kv_; ++h) {
      float* row = x + t * stride + h * dim_;
      const float scale = quantise_head(q.data(), row, dim_);
      for (int64_t i = 0; i < dim_; ++i)  // as load() dequantises
        row[i] = scale * static_cast<float>(q[static_cast<size_t>(i)]);
    }
  }
}

const float* KvCache::load(int w, int64_t l, int64_t s, int64_t n_positions,
                           std::vector<float>& scratch) const {
  if (dtype_ == KvDtype::f32) return f32(w) + base(l, s);
  const int64_t R = row(), n = local_count(n_positions);
  scratch.resize(static_cast<size_t>(n * R));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < kv_; ++h) {
      const float scale = scale_[w][static_cast<size_t>(((l * batch_ + s) * slots_ + t) * kv_ + h)];
      const int8_t* src = q8_[w].data() + base(l, s) + static_cast<size_t>(t * R + h * dim_);
      float* dst = scratch.data() + t * R + h * dim_;
      for (int64_t i = 0; i < dim_; ++i)
        dst[i] = scale * static_cast<float>(src[i]);
    }
  }
  return scratch.data();
}

const float* KvCache::keys(int64_t l, int64_t s, int64_t n, std::vector<float>& scratch) const {
  return load(0, l, s, n, scratch);
}

const float* KvCache::values(int64_t l, int64_t s, int64_t n, std::vector<float>& scratch) const {
  return load(1, l, s, n, scratch);
}

}  // namespace mt
