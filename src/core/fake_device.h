// The fake device (train.device = fake, for tests): proves the kernel seam on
// any CPU. Its memory is host memory handed out behind a tag bit that makes the
// pointer non-canonical on x86-64, so a host dereference that bypasses the
// seam faults at once (SIGSEGV) instead of reading device memory by accident.
// Its kernels (ops/kernels.h fake_kernels) untag their pointer arguments and run
// the CPU code, so results are bitwise the `cpu` device's; its copies to and
// from the host untag and are counted (core/device.h crossing counts).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/device.h"

namespace mt {

// Bit 62: outside the 47-bit (4-level) and 56-bit (5-level paging) user
// address ranges of x86-64, so a tagged pointer is non-canonical and a load
// through it raises a general-protection fault.
inline constexpr uintptr_t kFakeTag = uintptr_t{1} << 62;

inline bool fake_tagged(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & kFakeTag) != 0;
}

// A host pointer for a fake-device pointer (identity on a host pointer and on
// null), for the fake kernels and copies.
template <class T>
T* fake_untag(T* p) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) & ~kFakeTag);
}

// An argument as a fake kernel passes it on: pointers untagged, the rest as
// they are (references stay references).
template <class T>
decltype(auto) fake_host_arg(T&& v) {
  if constexpr (std::is_pointer_v<std::remove_cvref_t<T>>) {
    return fake_untag(v);
  } else {
    return std::forward<T>(v);
  }
}

DeviceAllocator& fake_allocator();

}  // namespace mt
