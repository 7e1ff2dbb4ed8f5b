"""torch.distributed through sdk:cuda_triton over NCCL, one process per visible GPU (1 or 2).

The CPU file (tests/test_distributed.py, gloo) covers the same three things on every machine;
here they run on CUDA tensors and NCCL, where a collective is asynchronous on its own stream
and a wait that the program forgets or places too early gives wrong values, not an error:

* functional collectives in a graph: all_reduce, all_gather_into_tensor and
  reduce_scatter_tensor are library calls whose results equal eager's;
* ``torch.compile(DDP(model))``: one sdk graph per gradient bucket, eager DDP's gradients;
* FSDP2 with each block's forward compiled: eager FSDP2's losses and weights.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

WORKER = textwrap.dedent('''
    import copy, os, sys
    import torch, torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.distributed._functional_collectives as funcol
    from torch.nn.parallel import DistributedDataParallel as DDP

    BACKEND = "sdk:cuda_triton"


    def sdk_graph_count():
        from sdk.core import pipeline
        calls = []
        original = pipeline.Session.compile_dynamo_graph

        def counting(self, gm, example_inputs):
            calls.append(gm)
            return original(self, gm, example_inputs)

        pipeline.Session.compile_dynamo_graph = counting
        return calls, lambda: setattr(pipeline.Session, "compile_dynamo_graph", original)


    def collectives(rank, dev):
        import sdk
        group = dist.group.WORLD

        def f(x, w, z):
            y = (x @ w).relu()
            s = funcol.all_reduce(y, "sum", group)
            g = funcol.all_gather_tensor(x * 2, 0, group)
            r = funcol.reduce_scatter_tensor(torch.cat([y] * dist.get_world_size()) + 1, "sum",
                                             0, group)
            u = (z.exp() + 1).sum(-1)  # independent of the communication
            return s.sin() + 1, g.sum(0), r * 3, u

        torch.manual_seed(rank)
        args = [torch.randn(64, 128, device=dev), torch.randn(128, 128, device=dev),
                torch.randn(256, 256, device=dev)]
        report = sdk.explain(f, *args, backend=BACKEND)
        (graph,) = report.graphs
        assert not graph.fallbacks, str(report)
        ops = {e.op.split(".")[1] for e in graph.externs}
        assert {"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
                "wait_tensor"} <= ops, ops
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=BACKEND)
        for _ in range(3):
            args = [torch.randn_like(a) for a in args]
            for a, b in zip(compiled(*args), f(*args)):
                torch.testing.assert_close(a, b)


    class Net(torch.nn.Module):
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


    def ddp(rank, dev):
        torch.manual_seed(0)
        model = Net().to(dev)
        ref = copy.deepcopy(model)
        ddp_ref = DDP(ref, device_ids=[dev.index], bucket_cap_mb=1)
        run = torch.compile(DDP(model, device_ids=[dev.index], bucket_cap_mb=1), backend=BACKEND)
        calls, restore = sdk_graph_count()
        try:
            torch.manual_seed(1 + rank)
            for _ in range(3):
                x = torch.randn(8, 32, device=dev)
                for m in (ref, model):
                    m.zero_grad(set_to_none=True)
                ddp_ref(x).square().mean().backward()
                run(x).square().mean().backward()
                for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                    torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"{name}: {m}")
        finally:
            restore()
        return len(calls)


    def fsdp2(rank, dev):
        from torch.distributed.fsdp import fully_shard

        def make():
            torch.manual_seed(0)
            m = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(
                64, 4, 128, dropout=0.0, batch_first=True) for _ in range(2)]).to(dev)
            for layer in m:
                fully_shard(layer)
            fully_shard(m)
            return m

        ref, model = make(), make()
        for layer in model:
            layer.forward = torch.compile(layer.forward, backend=BACKEND)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, model)]
        torch.manual_seed(1 + rank)
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
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.to_local(), q.to_local(), rtol=1e-4, atol=1e-5)


    def run(rank, world, port):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
        try:
            collectives(rank, dev)
            torch._dynamo.reset()
            pieces = ddp(rank, dev)
            torch._dynamo.reset()
            fsdp2(rank, dev)
            torch.cuda.synchronize()
            if rank == 0:
                print(f"RESULT world={world} ddp_pieces={pieces}", flush=True)
        finally:
            dist.destroy_process_group()


    if __name__ == "__main__":
        world = int(sys.argv[2])
        mp.spawn(run, args=(world, int(sys.argv[1])), nprocs=world)
''')


def test_collectives_ddp_and_fsdp2_over_nccl(tmp_path):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("NCCL is not available")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = min(2, torch.cuda.device_count())
    r = subprocess.run([sys.executable, str(script), str(port), str(world)],
                       capture_output=True, text=True, env=dict(os.environ), timeout=600,
                       check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT"))
    assert int(line.split("ddp_pieces=")[1]) >= 3, line  # split at the 1 MiB buckets
    print(line)
