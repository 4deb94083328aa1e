#!/usr/bin/env python3
"""The benchmark model (bench/torch_llama.py) under PyTorch DistributedDataParallel:
torch.distributed gloo, WORLD processes × THREADS threads, each rank a contiguous
slice of the global batch (meshtrain's --dp layout), float32, the same step
(zero grads, forward, backward with DDP's bucketed all-reduce, global-norm clip,
AdamW). DDP runs with its defaults (25 MiB buckets, all-reduce overlapped with
backward) except broadcast_buffers=False: the model's buffers (RoPE tables,
causal mask) are constants, and broadcasting them every forward would charge
PyTorch for a copy meshtrain does not make.

With --autocast bf16 the forward and the loss run under
torch.autocast("cpu", dtype=torch.bfloat16), as in bench/torch_llama.py.
usage: torch_ddp.py [--config configs/bench.toml] [--world 2] [--threads 1]
                    [--steps 5] [--warmup 2] [--autocast none|bf16]
                    [--label NAME] [--json FILE] [--profile FILE]
Rank 0 prints one JSON object (tokens/s, median step time of rank 0, the CPU
seconds of each step summed over the ranks, which BLAS was loaded). --profile writes torch.profiler's table of one step (rank 0) to FILE.
Exit status 3 when torch is not installed.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama import Llama, loaded_blas, read_config  # noqa: E402 (exits 3 without torch)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    cfg = read_config(args.config)
    m, t = cfg["model"], cfg["train"]
    B, T = t["batch_size"], t["seq_len"]
    if B % args.world:
        sys.exit(f"torch_ddp.py: batch_size ({B}) must be divisible by world ({args.world})")
    local = B // args.world
    torch.manual_seed(t.get("seed", 1234))  # the same initial weights on every rank
    model = Llama(m, T)
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    opt = torch.optim.AdamW(model.decay_groups(t.get("weight_decay", 0.1)), lr=t.get("lr", 3e-4),
                            betas=(t.get("beta1", 0.9), t.get("beta2", 0.95)), eps=t.get("adam_eps", 1e-8),
                            foreach=True)
    gen = torch.Generator().manual_seed(20240601)
    tokens = torch.randint(0, m["vocab_size"], (B, T + 1), generator=gen)[rank * local:(rank + 1) * local]
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    clip = t.get("grad_clip", 1.0)
    params = list(model.parameters())

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            logits = ddp(inputs)
            # Sum over this rank's tokens ÷ the global count, times world: DDP averages
            # the gradients over ranks, so the result is the global mean's gradient.
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1),
                                   reduction="sum") * (args.world / (B * T))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        return loss.item()  # this rank's mean token loss

    losses, times, cpus = [], [], []
    for _ in range(args.warmup):
        losses.append(step())
    dist.barrier()
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        losses.append(step())
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        if rank == 0:
            with open(args.profile, "w") as f:
                f.write(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total",
                                                                             row_limit=40, max_name_column_width=40))
                f.write("\n")
                f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    # CPU seconds per step, all threads of all ranks (gloo's included): each step's sum over ranks.
    per_rank = [None] * args.world
    dist.all_gather_object(per_rank, cpus)
    if rank == 0:
        med = statistics.median(times)
        cpu_steps = [sum(c) for c in zip(*per_rank)]
        out = {
            "impl": "pytorch-ddp", "label": args.label, "autocast": args.autocast, "torch": torch.__version__, "world": args.world,
            "threads": torch.get_num_threads(), "blas": loaded_blas(), "batch": B, "seq_len": T,
            "step_seconds": times, "median_step_s": med, "min_step_s": min(times), "tokens_per_s": B * T / med,
            "cpu_step_seconds": cpu_steps, "median_cpu_s": statistics.median(cpu_steps), "losses": losses,
        }
        text = json.dumps(out)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    # Every rank waits for rank 0's output, then leaves without destroy_process_group:
    # with torch 1.13 a rank whose peer had already torn down gloo was seen spinning in
    # its gloo thread (a full core, for minutes) instead of exiting.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/bench.toml")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none")
    ap.add_argument("--label", default="torch-ddp")
    ap.add_argument("--json", default="")
    ap.add_argument("--profile", default="")
    args = ap.parse_args()
    mp.spawn(rank_main, args=(args, free_port()), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
