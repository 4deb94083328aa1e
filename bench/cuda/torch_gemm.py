"""PyTorch's matmul rate at the shapes of bench/cuda/cuda_bench.cpp, so that
the cuBLAS figures of meshtrain's GEMM wrapper have a reference measured in the
same call (scripts/gpu_check.sh). Prints one `TORCH <shape> fp32=.. tf32=..
bf16=..` line per shape (TFLOP/s, median of CUDA-event-timed repeats)."""
import sys

import torch

SHAPES = [(8192, 8192, 8192, "square"),
          (8192, 2048, 2048, "llama1b q/o proj (B*T=8192)"),
          (8192, 11264, 2048, "llama1b gate+up"),
          (8192, 2048, 5632, "llama1b down")]


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def rate(m, n, k, dtype, tf32, reps):
    # "highest": true fp32 products; "high": TF32 tensor cores.
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    a = torch.rand(m, k, device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dtype)
    b = torch.rand(n, k, device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dtype)
    ms = median_ms(lambda: a @ b.T, reps)
    return 2.0 * m * n * k / ms / 1e9


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 0
    reps = 3 if "--quick" in sys.argv else 10
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for m, n, k, what in SHAPES:
        fp32 = rate(m, n, k, torch.float32, False, reps)
        tf32 = rate(m, n, k, torch.float32, True, reps)
        bf16 = rate(m, n, k, torch.bfloat16, False, reps)
        print(f"TORCH {what} fp32={fp32:.1f} tf32={tf32:.1f} bf16={bf16:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
