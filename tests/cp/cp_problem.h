// One attention problem split over a cp group: the whole sequence in a fused
// qkv buffer, its attention and gradients by the double reference (the
// single-process oracle), and this rank's tokens under a layout (zigzag or
// contiguous), with this rank's results to compare against the oracle's rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/group.h"
#include "ops/attention.h"
#include "parallel/context_parallel.h"

namespace mt::test {

struct CpCase {
  int64_t B = 1, T = 8, H = 4, KV = 2, D = 8;
  bool zigzag = true;  // else contiguous: rank r holds tokens [r·T/cp, (r+1)·T/cp)
  std::string str(int cp) const;
};

// hybrid: all-to-all within pairs of consecutive cp ranks, ring across the pairs (cp 4 and up).
enum class CpVariant { ring, allgather, ulysses, hybrid };

struct CpErrors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;  // relative to the oracle's scale
  // The same for the one-process fp32 kernels on the whole sequence (on this
  // rank's rows): the bounds' reference, testing::layout_tol (tests/bounds.h).
  double one_out = 0, one_lse = 0, one_dq = 0, one_dk = 0, one_dv = 0;
  bool out_padding_kept = true;  // the columns of out beyond H·D untouched
  cp::CpStats fwd, bwd;
};

// The global rows (= positions) this rank holds, in local order.
std::vector<int64_t> local_rows(const CpCase& c, int cp, int rank);

// Runs the forward and the backward of `variant` on `cp` (every rank of the
// group together) and compares this rank's out, lse, dq, dk, dv with the rows
// of the whole-sequence reference. dq/dk/dv start from random values to check
// that they are accumulated.
CpErrors run_cp_attention(const CpCase& c, CpVariant variant, Group& cp, std::string_view site = "attn");

}  // namespace mt::test
