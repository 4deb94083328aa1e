#!/usr/bin/env bash
# CPU emulation of the bf16 tensor-core attention kernels (no GPU needed):
# copies src/cuda's bf16 attention sources into a scratch folder with the CUDA
# constructs mapped onto emu_shim.h (a block = 128 std::threads with barriers;
# mma.sync computed from the PTX ISA fragment layouts), builds them with g++
# and compares against ops/attention_reference in double on small awkward
# shapes. Prints the relative L2 errors; docs/GPU.md gives the bounds.
#   bash tests/cuda/emulate/run.sh            (set EXACT=1 to compare with fp32 inputs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${WORK:-$(mktemp -d)}
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/inc/cuda"
cp "$here/emu_shim.h" "$work/inc/"
printf '#pragma once\n#include "emu_shim.h"\n' >"$work/inc/cuda/check.h"
printf '#pragma once\n#include "emu_shim.h"\n' >"$work/inc/cuda_bf16.h"
cat >"$work/inc/cuda/scratch.cuh" <<'H'
#pragma once
#include <vector>
namespace mt::cuda::detail {
template <typename T>
class Scratch {
 public:
  explicit Scratch(int64_t n) : v_(n > 0 ? n : 1) {}
  T* get() { return v_.data(); }

 private:
  std::vector<T> v_;
};
}  // namespace mt::cuda::detail
H
python3 - "$root/src/cuda" "$work/inc/cuda" <<'PY'
import re, sys
src, dst = sys.argv[1], sys.argv[2]
for f in ['attention_bf16.cuh', 'attention_bf16.cu', 'attention_bf16_backward.cu', 'launch.cuh', 'attention.cuh']:
    s = open(f'{src}/{f}').read()
    s = s.replace('#include <cuda_bf16.h>', '#include "emu_shim.h"')
    s = s.replace('extern __shared__ __align__(16) unsigned char smem_raw[];', 'unsigned char* smem_raw = g_dyn_smem;')
    s, n = re.subn(r'asm\("mma\.sync.*?\);\n', 'mma_emul(c, a, b0, b1);\n', s, flags=re.S)
    s = re.sub(r'(\w+(?:<[^<>]*>)?)<<<(.*?)>>>\((.*?)\);',
               lambda m: 'emu_launch_args(%s, [&] { %s(%s); });' % (m.group(2), m.group(1), m.group(3)), s, flags=re.S)
    if f.endswith('.cuh'):
        s = s.replace('#pragma once', '#pragma once\n#include "emu_shim.h"', 1)
    open(f'{dst}/{f}', 'w').write(s)
PY
g++ -std=c++20 -O2 -pthread -I"$work/inc" -I"$root/src" "$here/emulate_attention_bf16.cpp" -x c++ \
  "$work/inc/cuda/attention_bf16.cu" "$work/inc/cuda/attention_bf16_backward.cu" -x none \
  "$root/src/ops/attention_reference.cpp" "$root/src/core/philox.cpp" -o "$work/emulate"
"$work/emulate" "${1:-0}"
