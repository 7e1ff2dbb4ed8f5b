"""The processes of the distributed tests: ``python -m tests.distributed_worker PORT WORLD
DEVICE`` starts WORLD processes (gloo on ``cpu``, NCCL with one GPU each on ``cuda``) that
run DDP, FSDP2 and functional collectives through the device's built-in plugin against
eager, and print one ``RESULT`` line from rank 0 (tests/e2e/test_distributed.py,
tests/gpu/test_distributed_gpu.py)."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import socket
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

BACKENDS = {"cpu": "sdk:cpu_cpp", "cuda": "sdk:cuda_triton"}


@contextlib.contextmanager
def sdk_graphs():
    """The Dynamo graphs the sdk compiles inside the block."""
    from sdk.core import pipeline

    graphs = []
    compile_graph = pipeline.Session.compile_dynamo_graph

    def counting(self, gm, example_inputs):
        graphs.append(gm)
        return compile_graph(self, gm, example_inputs)

    pipeline.Session.compile_dynamo_graph = counting
    try:
        yield graphs
    finally:
        pipeline.Session.compile_dynamo_graph = compile_graph


class Net(torch.nn.Module):
    """A user's model. (Not an ``nn.Sequential``: Dynamo does not start tracing at a frame
    of torch's own modules, so ``torch.compile(DDP(nn.Sequential(...)))`` traces nothing,
    sdk or Inductor alike.)"""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(32, 512)
        self.hidden = torch.nn.ModuleList(torch.nn.Linear(512, 512) for _ in range(3))
        self.out = torch.nn.Linear(512, 4)

    def forward(self, x):
        x = torch.nn.functional.gelu(self.inp(x))
        for layer in self.hidden:
            x = layer(x).relu()
        return self.out(x)


def ddp(rank, dev, backend):
    """Both ways to combine DDP and torch.compile; returns how many Dynamo graphs the sdk
    compiled for each."""
    counts = []
    for wrap in ("ddp_of_compiled", "compiled_ddp"):
        torch._dynamo.reset()
        with sdk_graphs() as graphs:
            ddp_steps(rank, wrap, dev, backend)
        counts.append(len(graphs))
    return counts


def ddp_steps(rank, wrap, dev, backend):
    """Three DDP steps of a compiled model (``wrap``: which way) against eager DDP."""
    torch.manual_seed(0)
    model = Net().to(dev)  # ~3 MiB: 3+ buckets
    ref = copy.deepcopy(model)
    ids = [dev.index] if dev.type == "cuda" else None
    ddp_ref = DDP(ref, device_ids=ids, bucket_cap_mb=1)
    if wrap == "ddp_of_compiled":
        ddp_model = DDP(torch.compile(model, backend=backend), device_ids=ids, bucket_cap_mb=1)
        run = ddp_model
    else:
        ddp_model = DDP(model, device_ids=ids, bucket_cap_mb=1)
        run = torch.compile(ddp_model, backend=backend)
    torch.manual_seed(1 + rank)  # each rank its own data: the all-reduce matters
    for _ in range(3):
        x = torch.randn(8, 32, device=dev)
        for m, fn in ((ddp_ref, ddp_ref), (ddp_model, run)):
            m.zero_grad(set_to_none=True)
            fn(x).square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"{name}: {m}")


def fsdp2(rank, dev, backend):
    """FSDP2 training of a small transformer: each sharded layer's forward compiled (the
    sharding hooks stay outside the graph); losses and updated weights against eager FSDP2.
    Returns how many Dynamo graphs the sdk compiled."""
    from torch.distributed.fsdp import fully_shard

    def make():
        torch.manual_seed(0)
        m = torch.nn.Sequential(
            *[
                torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
                for _ in range(2)
            ]
        ).to(dev)
        for layer in m:
            fully_shard(layer)
        fully_shard(m)
        return m

    ref, model = make(), make()
    for layer in model:
        layer.forward = torch.compile(layer.forward, backend=backend)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, model)]
    torch.manual_seed(1 + rank)
    with sdk_graphs() as graphs:
        for _ in range(3):
            x = torch.randn(2, 8, 64, device=dev)
            losses = []
            for m, opt in zip((ref, model), opts):
                loss = m(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.detach())
            torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):  # this rank's shards
        torch.testing.assert_close(p.to_local(), q.to_local(), rtol=1e-4, atol=1e-5)
    return len(graphs)


def collectives(rank, dev, backend):
    """all_reduce, all_gather_into_tensor and reduce_scatter_tensor in a graph: library
    calls with eager's results; on the CPU also where they are placed: the kernel that
    reads ``z`` runs after the collectives start and before their waits."""
    import sdk

    group = dist.group.WORLD

    def f(x, w, z):
        y = (x @ w).relu()
        s = funcol.all_reduce(y, "sum", group)
        g = funcol.all_gather_tensor(x * 2, 0, group)
        r = funcol.reduce_scatter_tensor(
            torch.cat([y] * dist.get_world_size()) + 1, "sum", 0, group
        )
        u = (z.exp() + 1).sum(-1)  # independent of the communication
        return s.sin() + 1, g.sum(0), r * 3, u

    shapes = [(4, 8), (8, 8), (16, 16)]
    torch.manual_seed(rank)
    report = sdk.explain(f, *(torch.randn(s, device=dev) for s in shapes), backend=backend)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend)
    for _ in range(2):
        args = [torch.randn(s, device=dev) for s in shapes]
        for a, b in zip(compiled(*args), f(*args)):
            torch.testing.assert_close(a, b)
    (graph,) = report.graphs
    assert not graph.fallbacks, str(report)
    # the collectives and their waits are the runner's calls through the dispatcher too
    assert graph.runner == "native", graph.runner
    ops = {e.op.split(".")[1] for e in graph.externs}
    assert {
        "all_reduce",
        "all_gather_into_tensor",
        "reduce_scatter_tensor",
        "wait_tensor",
    } <= ops, ops
    if dev.type == "cpu":
        # the program's steps: the kernel of z (input 2) between the collectives and waits
        lines = graph.program.splitlines()
        z = re.search(r"(%\d+) = input 2$", graph.program, re.M).group(1)
        z_kernel = next(i for i, ln in enumerate(lines) if re.search(rf"launch \w+\({z}[,)]", ln))
        collective = (
            r"= _c10d_functional\.(all_reduce|all_gather_into_tensor|reduce_scatter_tensor)\."
        )
        starts = [i for i, ln in enumerate(lines) if re.search(collective, ln)]
        waits = [i for i, ln in enumerate(lines) if "= _c10d_functional.wait_tensor." in ln]
        assert len(waits) == 3 and starts and max(starts) < z_kernel < min(waits), graph.program
    return "ok"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, world, port, device):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    backend = BACKENDS[device]
    if device == "cuda":
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        inner, outer = ddp(rank, dev, backend)
        torch._dynamo.reset()
        f = fsdp2(rank, dev, backend)
        torch._dynamo.reset()
        c = collectives(rank, dev, backend)
        if device == "cuda":
            torch.cuda.synchronize()
        if rank == 0:
            print(
                f"RESULT world={world} ddp_of_compiled={inner} compiled_ddp={outer} "
                f"fsdp2={f} collectives={c}",
                flush=True,
            )
    finally:
        dist.destroy_process_group()
    # done (rank 0's result is out): the spawned process exits without the interpreter's last
    # collections over all that torch made; exit handlers still run
    import gc

    gc.freeze()


if __name__ == "__main__":
    port, world, device = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    mp.spawn(run, args=(world, port, device), nprocs=world)
