#!/usr/bin/env bash
# The distributed parity suites under the summation orders a host can impose
# (docs/PARALLELISM.md "How the bounds are derived"): OpenBLAS's AVX2 (Haswell)
# and AVX-512 (SkylakeX) sgemm kernels, and a build for x86-64-v3 (256-bit
# vectors, so `omp simd` reductions sum in another order than -march=native on
# an AVX-512 host). An AVX2 host runs the Haswell and x86-64-v3 legs and says
# that it skips SkylakeX.
#   scripts/parity_legs.sh [BUILD] [SUITE...]
# BUILD: the native build folder (default build); SUITE: tests/dist/*.sh names
# (default: the suites whose bounds are derived). Each line gives the worst
# layout difference over its bound and, for a mixture of experts, the smallest
# top-k margin over the derivation's guard. The x86-64-v3 build goes to
# BUILD-x86-64-v3 (meshtrain only, about as long as a first build).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(parity parity_pp parity_tp parity_cp tp2d checkpoint_reshard parity_optim
  parity_dropout parity_moe parity_ep parity_bf16)
v3=$build-x86-64-v3
cmake -S . -B "$v3" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHTRAIN_WERROR=ON -DMESHTRAIN_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DMESHTRAIN_WITH_CUDA=OFF -DMESHTRAIN_BUILD_BENCH=OFF >/dev/null &&
  cmake --build "$v3" --target meshtrain >/dev/null || { echo "the x86-64-v3 build failed"; exit 1; }

legs=("Haswell $build" "native $v3")
if grep -q avx512f /proc/cpuinfo; then
  legs+=("SkylakeX $build")
else
  echo "note: this host has no AVX-512: the SkylakeX leg is skipped"
fi
# ratios LOG: the worst layout difference over its bound, in the gradient norm and in any of
# the compared quantities; the step-0 checks (bf16) and the smallest top-k margin over its guard.
ratios() {
  python3 - "$1" <<'PY'
import re, sys
num = r"([0-9.]+e[+-][0-9]+)"
g = a = s0 = 0.0
guard = None
for line in open(sys.argv[1]):
    m = re.search(r"losses: .*?worst relative difference " + num + r".*?grad_norm: .*?worst relative difference "
                  + num + r" at step [0-9]+ \([^)]*\)( \[rtol " + num + r"\])? tensors: .*?worst relative L2 difference "
                  + num + r" in \S+( \[rtol " + num + r"\])? same within rtol " + num, line)
    if m:
        rl = float(m[8])
        rg, rt = float(m[4] or rl), float(m[7] or rl)
        g = max(g, float(m[2]) / rg)
        a = max(a, g, float(m[1]) / rl, float(m[5]) / rt)
    m = re.search(r"^ok   \S+: step 0: loss " + num + ", grad_norm " + num + r" relative \(bounds " + num + " " + num, line)
    if m:
        s0 = max(s0, float(m[1]) / float(m[3]), float(m[2]) / float(m[4]))
    for m in re.finditer(r"margin / guard ([0-9.e+-]+)", line):
        guard = float(m[1]) if guard is None else min(guard, float(m[1]))
out = "of bounds: grad_norm %.3g, any %.3g" % (g, a)
if s0:
    out += ", step 0 %.3g" % s0
if guard is not None:
    out += ", margin/guard >= %.3g" % guard
print(out)
PY
}
failed=0
for leg in "${legs[@]}"; do
  read -r core dir <<<"$leg"
  for suite in "${suites[@]}"; do
    log=$(mktemp)
    if [ "$core" = native ]; then
      (unset OPENBLAS_CORETYPE; bash "tests/dist/$suite.sh" "$dir/meshtrain") >"$log" 2>&1
    else
      OPENBLAS_CORETYPE=$core bash "tests/dist/$suite.sh" "$dir/meshtrain" >"$log" 2>&1
    fi
    rc=$?
    worst=$(grep -o 'grad_norm: [0-9]* steps, worst relative difference [0-9.e+-]*' "$log" | awk '{print $7}' |
      sort -g | tail -1)
    printf '%-8s %-22s %-20s %s (worst grad_norm difference %s; %s)\n' "$core" "$(basename "$dir")" "$suite" \
      "$([ $rc -eq 0 ] && echo pass || echo FAIL)" "${worst:-none}" "$(ratios "$log")"
    [ $rc -eq 0 ] || { failed=1; grep FAIL "$log" | head -5; }
    rm -f "$log"
  done
done
exit $failed
