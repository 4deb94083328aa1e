// The device mirror of a host array: the integer data the kernels read —
// token ids, targets, positions, dropout's coordinates — made on the host and
// mirrored onto the run's device (core/device.h) by an explicit, labelled
// crossing. On the host device the mirror is the host array itself: no copy,
// no allocation, so a cpu run is byte for byte what it was before the seam.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"

namespace mt {

template <class T>
class DeviceMirror {
 public:
  // Points the mirror at `host`'s contents on the run's device (`label` names
  // the crossing); grows the device buffer, charged to `kind`, when needed.
  void mirror(const std::vector<T>& host, const char* label, MemKind kind) {
    if (run_allocator().device() == kHost) {
      ptr_ = host.data();
      return;
    }
    const auto n = static_cast<int64_t>(host.size());
    if (n > capacity_) {
      buf_ = DeviceBuffer(run_allocator(), n * int64_t{sizeof(T)}, kind);
      capacity_ = n;
    }
    copy_from_host(buf_.data(), host.data(), n * int64_t{sizeof(T)}, label);
    ptr_ = static_cast<const T*>(buf_.data());
  }
  // The mirrored data on the run's device (null before the first mirror()).
  const T* data() const { return ptr_; }

 private:
  const T* ptr_ = nullptr;
  int64_t capacity_ = 0;
  DeviceBuffer buf_;
};

// n elements of scratch on the run's device for one call: a plain host vector
// on the host device (untracked, as the loops it serves always had), else a
// device buffer charged to MemKind::scratch. Zero-initialised.
template <class T>
class DeviceScratch {
 public:
  explicit DeviceScratch(int64_t n) {
    if (run_allocator().device() == kHost) {
      host_.resize(static_cast<size_t>(n));
      ptr_ = host_.data();
    } else {
      buf_ = DeviceBuffer(run_allocator(), n * int64_t{sizeof(T)}, MemKind::scratch);
      ptr_ = static_cast<T*>(buf_.data());
    }
  }
  T* data() { return ptr_; }

 private:
  T* ptr_ = nullptr;
  std::vector<T> host_;
  DeviceBuffer buf_;
};

// n elements held on the run's device (a member's storage, sized once): a
// plain host vector on the host device (untracked, as the arrays it replaces
// always were), else a device buffer charged to `kind`. Zero-initialised.
template <class T>
class DeviceArray {
 public:
  void assign(int64_t n, MemKind kind) {
    size_ = n;
    if (run_allocator().device() == kHost) {
      host_.assign(static_cast<size_t>(n), T{});
      ptr_ = host_.data();
    } else {
      buf_ = DeviceBuffer(run_allocator(), n * int64_t{sizeof(T)}, kind);
      ptr_ = static_cast<T*>(buf_.data());
    }
  }
  // Grows to at least n elements (the contents are not kept).
  void reserve(int64_t n, MemKind kind) {
    if (n > size_) assign(n, kind);
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  int64_t size() const { return size_; }

 private:
  T* ptr_ = nullptr;
  int64_t size_ = 0;
  std::vector<T> host_;
  DeviceBuffer buf_;
};

// The host's view of n elements of device memory, for the crossings out (the
// loss sum, MoE routing counts): the memory itself on the host device, else a
// host copy taken once (`label` names the crossing).
template <class T>
class HostView {
 public:
  HostView(const T* device_data, int64_t n, const char* label) {
    if (n <= 0 || device_of(device_data) == kHost) {
      ptr_ = device_data;
      return;
    }
    copy_.resize(static_cast<size_t>(n));
    copy_to_host(copy_.data(), device_data, n * int64_t{sizeof(T)}, label);
    ptr_ = copy_.data();
  }
  const T* data() const { return ptr_; }
  const T& operator[](int64_t i) const { return ptr_[i]; }

 private:
  const T* ptr_ = nullptr;
  std::vector<T> copy_;
};

}  // namespace mt
