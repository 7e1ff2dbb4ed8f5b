"""Profile one GPT-2 training step through sdk:<plugin> and Inductor: where the time goes.

    python benchmarks/profile_gpt2.py [--plugin cuda_triton] [--layers 4]

Prints, for each backend, the step time, the number of kernel launches per
step, the CPU time spent launching, and the ten most expensive GPU kernels.
"""

from __future__ import annotations

import argparse
import time

import torch
import transformers

import sdk


def step_fn(model, ids):
    def step():
        loss = model(ids, labels=ids).loss
        loss.backward()
        return loss

    return step


def measure(name, step, n=20):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / n * 1e3
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    gpu = sorted(
        (e for e in events if e.device_type == torch.autograd.DeviceType.CUDA),
        key=lambda e: -e.self_device_time_total,
    )
    total_gpu = sum(e.self_device_time_total for e in gpu) / 1e3
    launches = sum(e.count for e in gpu)
    print(f"== {name}: {wall:.2f} ms/step wall, GPU busy {total_gpu:.2f} ms, {launches} kernels")
    for e in gpu[:20]:
        print(f"   {e.self_device_time_total / 1e3:8.3f} ms  x{e.count:<4d} {e.key[:100]}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plugin", default="cuda_triton")
    p.add_argument("--layers", type=int, default=4)
    a = p.parse_args()
    cfg = transformers.GPT2Config(
        n_layer=a.layers, n_embd=768, n_head=12, attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).cuda().to(torch.bfloat16)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda")
    measure("eager", step_fn(model, ids))
    m2 = torch.compile(model, backend=sdk.backend(a.plugin))
    t = time.perf_counter()
    step_fn(m2, ids)()
    torch.cuda.synchronize()
    print(f"sdk cold {time.perf_counter() - t:.1f}s")
    measure(f"sdk:{a.plugin}", step_fn(m2, ids))
    r = sdk.explain(lambda i: model(i, labels=i).loss, ids, backend=f"sdk:{a.plugin}")
    for g in r.graphs:
        print(
            f"   {g.name} {g.kind}: {len(g.kernels)} kernels {len(g.externs)} externs "
            f"{len(g.fallbacks)} fallbacks {g.compile_seconds:.1f}s"
        )
    m3 = torch.compile(model)
    t = time.perf_counter()
    step_fn(m3, ids)()
    torch.cuda.synchronize()
    print(f"inductor cold {time.perf_counter() - t:.1f}s")
    measure("inductor", step_fn(m3, ids))


if __name__ == "__main__":
    main()
