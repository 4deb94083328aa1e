#!/usr/bin/env bash
# The GPU check (docs/GPU.md), in two modes:
#
#   scripts/gpu_check.sh pack   on a development machine (nvcc, no GPU needed):
#                               builds the CUDA kernel tests and the GPU benchmark
#                               for sm_90 into build-gpu/ and copies them to .gpu/
#                               (ignored by git; the one path to carry).
#   scripts/gpu_check.sh        on the GPU machine, from the repository root: runs
#                               the kernel tests, the benchmark and PyTorch's GEMM
#                               rate, logs under $OUT (or /tmp/gpu_check), and prints
#                               a summary table last. Add --quick for fewer repeats.
#                               If the packed binaries do not start there, it first
#                               rebuilds them with that machine's nvcc (build-on-device).
#
# The binaries need only libcublas/libcublasLt 13 on the GPU machine (C++ runtime,
# cudart and GoogleTest are linked in); pack checks that with ldd.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.gpu

pack() {
  set -e
  local build=${BUILD:-build-gpu}
  # No -march=native: the GPU machine's CPU is not this one.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHTRAIN_WERROR=ON -DMESHTRAIN_NATIVE=OFF \
    -DMESHTRAIN_WITH_CUDA=ON -DMESHTRAIN_BUILD_TESTS=ON -DMESHTRAIN_BUILD_BENCH=ON >/dev/null
  cmake --build "$build" -j "${JOBS:-2}" --target cuda_tests cuda_bench
  rm -rf "$PACK" && mkdir -p "$PACK/bin"
  cp "$build/tests/cuda/cuda_tests" "$build/bench/cuda_bench" "$PACK/bin/"
  # GoogleTest's sources, for a rebuild on the GPU machine should these
  # binaries not start there (another C library; see build_on_device).
  mkdir -p "$PACK/googletest" && cp -r /usr/src/googletest/googletest/{include,src} "$PACK/googletest/"
  local allowed='linux-vdso|ld-linux|lib(c|m|rt|dl|pthread|gcc_s)\.so|libcublas(Lt)?\.so\.13'
  for exe in "$PACK"/bin/*; do
    if ldd "$exe" | grep -vE "$allowed" | grep . >/dev/null; then
      echo "gpu_check pack: $exe needs libraries the GPU machine lacks:" >&2
      ldd "$exe" | grep -vE "$allowed" >&2
      exit 1
    fi
  done
  { echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- src tests bench || echo ' (dirty)')"
    echo "built $(date -u +%FT%TZ) with $(nvcc --version | tail -1)"; } >"$PACK/MANIFEST"
  echo "packed: $(du -sh "$PACK" | cut -f1) in $PACK/ ($(ls "$PACK/bin" | tr '\n' ' '))"
}

# Puts a directory holding libcublas.so.13 on the loader path if it is not found.
find_cublas() {
  ldd "$PACK/bin/cuda_tests" | grep "libcublas.so.13 => not found" >/dev/null || return 0
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
      $(python3 -c 'import os, nvidia; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
    if [ -e "$d/libcublas.so.13" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      return 0
    fi
  done
}

# Fallback when the packed binaries do not start on this machine (e.g. a C
# library older than the one they were linked against): compile the same
# sources here with nvcc, one job per file, into $PACK/local/.
build_on_device() {
  local obj=$PACK/local/obj g=$PACK/googletest
  mkdir -p "$obj" "$PACK/local/bin"
  local flags=(-std=c++20 -O3 -arch=sm_90 -Isrc -Itests -I"$g/include" -I"$g" -Xcompiler=-pthread)
  local srcs=(src/cuda/*.cu src/core/memory.cpp src/core/device.cpp src/ops/reference.cpp
              src/ops/attention_reference.cpp src/core/philox.cpp tests/cuda/*.cpp "$g/src/gtest-all.cc"
              bench/cuda/cuda_bench.cpp)
  local f pids=()
  for f in "${srcs[@]}"; do
    nvcc "${flags[@]}" -c "$f" -o "$obj/$(echo "$f" | tr '/.' '__').o" & pids+=($!)
  done
  for f in "${pids[@]}"; do wait "$f" || return 1; done
  local lib=("$obj"/src_cuda_*.o "$obj"/src_core_*.o)
  nvcc -arch=sm_90 -o "$PACK/local/bin/cuda_tests" "${lib[@]}" "$obj"/src_ops_*.o "$obj"/tests_cuda_*.o \
    "$obj"/*gtest-all_cc.o -lcublas -lpthread || return 1
  nvcc -arch=sm_90 -o "$PACK/local/bin/cuda_bench" "${lib[@]}" "$obj"/bench_cuda_*.o -lcublas || return 1
}

summary() {
  local out=$1 rc_tests=$2
  echo
  echo "================ GPU check summary ($(head -1 "$out/cuda_tests.log" 2>/dev/null))"
  echo "-- kernel tests (relative L2 vs double reference; rc=$rc_tests)"
  if [ -s "$out/kernel_errors.txt" ]; then
    # Per kernel: checks passed and failed, and the check with the largest error/bound.
    printf "%-16s %5s %5s %10s %8s  %s\n" kernel pass fail "worst err" bound "(tensor)"
    awk '{ k=$1; n[k]++; if ($5 != "pass") f[k]++; r = ($4 > 0 ? $3/$4 : $3);
           if (!(k in w) || r > w[k]) { w[k] = r; e[k] = $3; b[k] = $4; t[k] = $2 } }
         END { for (k in n) printf "%-16s %5d %5d %10.2e %8.1e  (%s)\n", k, n[k]-f[k], f[k], e[k], b[k], t[k] }' \
      "$out/kernel_errors.txt" | sort
    grep " FAIL$" "$out/kernel_errors.txt" | sed 's/^/FAILED: /'
  fi
  grep -E "^\[  (PASSED|FAILED) " "$out/cuda_tests.log"
  echo "-- GEMM TFLOP/s (meshtrain cuBLAS | PyTorch matmul)"
  paste -d'|' <(grep "^GEMM " "$out/cuda_bench.log" | sed 's/^GEMM //') \
              <(grep "^TORCH " "$out/torch_gemm.log" | sed 's/^TORCH [^=]*\(fp32=\)/\1/') 2>/dev/null
  echo "-- kernels at the Llama-1B shape"
  grep "^KERNEL " "$out/cuda_bench.log" | sed 's/^KERNEL //'
}

run() {
  local out=${OUT:-/tmp/gpu_check} quick=${1:-}
  mkdir -p "$out"
  if [ ! -x "$PACK/bin/cuda_tests" ]; then
    echo "gpu_check: $PACK/bin/cuda_tests missing: run 'scripts/gpu_check.sh pack' first and carry $PACK" >&2
    exit 2
  fi
  cat "$PACK/MANIFEST" 2>/dev/null
  { nvidia-smi 2>&1 || true; } >"$out/nvidia-smi.txt"
  find_cublas
  ldd "$PACK/bin/cuda_tests" >"$out/ldd.txt" 2>&1
  local bin=$PACK/bin
  if ! "$bin/cuda_tests" --gtest_list_tests >"$out/start_probe.txt" 2>&1; then
    echo "gpu_check: packed binaries do not start here ($(head -c 300 "$out/start_probe.txt")); rebuilding with nvcc"
    build_on_device >"$out/device_build.log" 2>&1 || { echo "gpu_check: rebuild failed, see device_build.log"; tail -20 "$out/device_build.log"; exit 3; }
    bin=$PACK/local/bin
  fi
  rm -f "$out/kernel_errors.txt"
  MT_CUDA_REPORT="$out/kernel_errors.txt" timeout 150 "$bin/cuda_tests" \
    --gtest_output="xml:$out/cuda_tests.xml" >"$out/cuda_tests.log" 2>&1
  local rc_tests=$?
  if grep -q "^no CUDA device: skipped" "$out/cuda_tests.log"; then
    echo "no CUDA device: skipped (kernel tests and benchmark need a GPU)"
    return 0
  fi
  timeout 240 "$bin/cuda_bench" $quick >"$out/cuda_bench.log" 2>&1 || echo "cuda_bench failed: rc=$?" >>"$out/cuda_bench.log"
  timeout 120 python3 bench/cuda/torch_gemm.py $quick >"$out/torch_gemm.log" 2>&1 || echo "torch_gemm failed: rc=$?" >>"$out/torch_gemm.log"
  tail -n 40 "$out/cuda_tests.log" | grep -E "Failure|error|Expected|Which is|FAILED" | head -20
  cat "$out/cuda_bench.log" | grep -vE "^(GEMM|KERNEL) " | tail -n 30
  tail -n 3 "$out/torch_gemm.log"
  summary "$out" "$rc_tests"
  return "$rc_tests"
}

case "${1:-run}" in
  pack) pack ;;
  build-on-device) build_on_device && ls -la "$PACK/local/bin" ;;
  run) run "${2:-}" ;;
  --quick) run --quick ;;
  *) echo "usage: scripts/gpu_check.sh [pack | run [--quick] | --quick | build-on-device]" >&2; exit 2 ;;
esac
