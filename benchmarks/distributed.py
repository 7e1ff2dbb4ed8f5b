"""DDP and FSDP2 training steps of GPT-2, eager vs Inductor vs the sdk, on several processes.

One process per GPU over NCCL (``--nproc`` defaults to the GPU count, at least 2), or
``--nproc`` CPU processes over gloo without GPUs (``--small`` for a CPU-sized model). Every
backend is compiled the way that works with each wrapper on torch 2.11 and 2.13:

* DDP: ``torch.compile(DDP(model), backend=...)``: Dynamo's DDP optimizer splits the graph
  at the gradient buckets, each piece compiled by the backend;
* FSDP2: ``fully_shard`` on each transformer block and the root, each block's ``forward``
  compiled (compiling the sharded module compiles nothing: its hooks disable Dynamo).

Each row trains from the same weights on the same per-rank batches; the losses of every
step are checked against eager's (fp32: rtol 1e-4; bf16: 2e-2), then the step is timed: the
median over ``--steps`` steps after warm-up, the wall time of rank 0 with the device
synchronized. Prints a table; ``--json`` writes it.

    torchrun is not needed:  python benchmarks/distributed.py --wrap ddp,fsdp2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time


def _model(small: bool, dtype, device):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = (
        GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=128, vocab_size=1024)
        if small
        else GPT2Config(n_layer=12, n_embd=768, n_head=12)
    )
    cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0
    cfg.use_cache = False  # training: no KV cache (one per block made each block recompile)
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).to(device=device, dtype=dtype), cfg


def _wrapped(wrap: str, backend: str, small: bool, dtype, device):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    model, cfg = _model(small, dtype, device)

    def compiled(fn):
        if backend == "eager":
            return fn
        return torch.compile(fn, backend=backend)

    if wrap == "none":  # no wrapper: the same model and step on each process alone
        return compiled(model), model, cfg
    if wrap == "ddp":
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        return compiled(ddp), model, cfg
    from torch.distributed.fsdp import fully_shard

    for block in model.transformer.h:
        fully_shard(block)
        block.forward = compiled(block.forward)
    fully_shard(model)
    return model, model, cfg


def worker(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    from sdk.core import pipeline

    pieces: list[object] = []  # the graphs the sdk compiled: under DDP, one per bucket
    compile_graph = pipeline.Session.compile_dynamo_graph

    def counting(self, gm, example_inputs):
        pieces.append(gm)
        return compile_graph(self, gm, example_inputs)

    pipeline.Session.compile_dynamo_graph = counting

    dtype = getattr(torch, args.dtype)
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    rows = []
    for wrap in args.wrap.split(","):
        want = None
        for backend in ("eager", "inductor", f"sdk:{args.plugin}"):
            torch._dynamo.reset()
            counters = torch._dynamo.utils.counters
            counters.clear()
            pieces.clear()
            model, base, cfg = _wrapped(wrap, backend, args.small, dtype, device)
            opt = torch.optim.SGD(base.parameters(), lr=1e-3)
            g = torch.Generator(device="cpu").manual_seed(1 + rank)
            seq = 64 if args.small else 512
            batches = [
                torch.randint(0, cfg.vocab_size, (args.batch, seq), generator=g).to(device)
                for _ in range(args.warmup + args.steps)
            ]
            losses, times = [], []
            for i, ids in enumerate(batches):
                if cuda:
                    torch.cuda.synchronize()
                t = time.perf_counter()
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if cuda:
                    torch.cuda.synchronize()
                if i >= args.warmup:
                    times.append(time.perf_counter() - t)
                losses.append(loss.detach().float().cpu())
            prof = {}
            if args.profile and cuda:  # one more step: device time by kind, rank 0's view
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CUDA]) as p:
                    loss = model(input_ids=batches[-1], labels=batches[-1]).loss
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    torch.cuda.synchronize()
                for e in p.events():
                    if e.device_type == torch.autograd.DeviceType.CUDA:
                        kind = (
                            "nccl"
                            if "nccl" in e.name.lower()
                            else (
                                "gemm"
                                if any(
                                    k in e.name.lower()
                                    for k in ("gemm", "cutlass", "sm90", "nvjet")
                                )
                                else "other"
                            )
                        )
                        prof[kind] = prof.get(kind, 0.0) + e.device_time / 1e3
            check = "ok"
            if want is None:
                want = losses
            else:
                try:
                    torch.testing.assert_close(torch.stack(losses), torch.stack(want), **tol)
                except AssertionError as exc:
                    check = "MISMATCH " + str(exc).splitlines()[0]
            rows.append(
                {
                    "wrap": wrap,
                    "backend": backend,
                    "ms": statistics.median(times) * 1e3,
                    "graphs": counters["stats"]["unique_graphs"],
                    "sdk_graphs": len(pieces),
                    "device_ms": prof,
                    "check": check,
                    "losses": [float(x) for x in losses],
                }
            )
            del model, base, opt
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wrap", default="ddp,fsdp2", help="ddp, fsdp2, none (no wrapper)")
    ap.add_argument("--plugin", default=None, help="cuda_triton on GPUs, else cpu_cpp")
    ap.add_argument("--nproc", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="a 2-layer GPT-2 (CPU runs, tests)")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="GPUs: one more step under the profiler, device time by kind",
    )
    args = ap.parse_args()

    import tempfile

    import torch
    import torch.multiprocessing as mp

    cuda = torch.cuda.is_available()
    args.plugin = args.plugin or ("cuda_triton" if cuda else "cpu_cpp")
    world = args.nproc or max(2, torch.cuda.device_count() if cuda else 2)  # 1: one process
    if cuda and torch.cuda.device_count() < world:
        print(
            f"error: --nproc {world} needs {world} GPUs, {torch.cuda.device_count()} visible",
            file=sys.stderr,
        )
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        mp.spawn(worker, args=(world, port, args, out), nprocs=world)
        with open(out) as f:
            rows = json.load(f)
    where = torch.cuda.get_device_name() if cuda else "CPU (gloo)"
    print(
        f"GPT-2 {'2-layer' if args.small else 'small'} training step, {world} processes, "
        f"{where}, {args.dtype}, batch {args.batch} per rank; median ms of {args.steps}"
    )
    print("graphs: Dynamo's; pieces: the graphs the sdk compiled (DDP: one per bucket)")
    print(
        f"{'wrap':<7}{'backend':<18}{'graphs':>7}{'pieces':>7}{'ms':>10}{'vs eager':>10}"
        f"{'vs inductor':>13}  check"
    )
    for r in rows:
        eager = next(x["ms"] for x in rows if x["wrap"] == r["wrap"] and x["backend"] == "eager")
        ind = next(x["ms"] for x in rows if x["wrap"] == r["wrap"] and x["backend"] == "inductor")
        print(
            f"{r['wrap']:<7}{r['backend']:<18}{r['graphs']:7d}{r['sdk_graphs'] or '':>7}{r['ms']:10.2f}{r['ms'] / eager:10.2f}"
            f"{r['ms'] / ind:13.2f}  {r['check']}"
        )
        if r["device_ms"]:
            print(
                "       device ms (one step): "
                + ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["device_ms"].items()))
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"world": world, "device": where, "dtype": args.dtype, "rows": rows}, f, indent=1
            )
    return 0 if all(r["check"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
