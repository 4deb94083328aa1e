// Shared by the MPI gtest programs: the world group of the running job (set up
// by mpi_test_main.cpp). Every rank runs every test, so a test must call the
// same collectives in the same order on every rank; use EXPECT_* rather than
// ASSERT_* before a collective, so that a failing rank does not skip it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "comm/group.h"

namespace mt::test {

Group& world();
int local_ranks();

template <typename T>
constexpr ElemType elem_type_of() {
  if constexpr (std::is_same_v<T, float>) return ElemType::f32;
  if constexpr (std::is_same_v<T, double>) return ElemType::f64;
  if constexpr (std::is_same_v<T, int32_t>) return ElemType::i32;
  return ElemType::i64;
}

}  // namespace mt::test
