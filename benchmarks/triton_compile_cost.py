"""What a ResNet-50 training step's Triton kernels cost to compile, without a GPU.

Triton compiles for a CUDA target on any machine (its bundled ptxas makes the cubin), so the
Triton share of a cold compile can be measured on a CPU machine. In a child process per
layout (channels-last, NCHW), a ResNet-50 training step (bf16, 16x3x224x224, the models
suite's ``resnet50_train_bf16``; torchvision's model when importable, else the same
bottleneck net defined here) is compiled by ``sdk:cuda_triton`` under ``TRITON_INTERPRET=1``
with the backward compiled with the forward; its kernel sources are taken from the plugin's
``compile_sources`` and the step stops there (nothing runs). Each kernel is then compiled
for sm_90, one after another (a GPU host overlaps them partly: its threads hold Python's lock
for much of a compile), and timed by kind. The kernels whose bodies are the same up to
the kernel's and its pointer arguments' names (with the same launch configuration and argument
dtypes) are counted too: those could compile once.

    python benchmarks/triton_compile_cost.py            # both layouts, about 6 min on 2 cores
"""

from __future__ import annotations

import argparse
import collections
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time


def _resnet50():
    try:
        import torchvision

        return torchvision.models.resnet50()
    except ImportError:
        pass
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, inp: int, planes: int, stride: int = 1, down=None) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(inp, planes, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3, self.down = nn.BatchNorm2d(planes * 4), down

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu())).relu()
            return (self.bn3(self.conv3(out)) + idt).relu()

    layers, inp = [], 64
    for planes, n, stride in zip((64, 128, 256, 512), (3, 4, 6, 3), (1, 2, 2, 2)):
        down = nn.Sequential(
            nn.Conv2d(inp, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4)
        )
        layers.append(Bottleneck(inp, planes, stride, down))
        inp = planes * 4
        layers += [Bottleneck(inp, planes) for _ in range(1, n)]
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        *layers,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2048, 1000),
    )


def capture(layout: str, out: str) -> None:
    """(child) The step's kernel sources, pickled to ``out``; exits when both graphs are in."""
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import torch._functorch.config as functorch_config

    import sdk
    from sdk.plugins.cuda_triton import launch

    functorch_config.force_non_lazy_backward_lowering = True
    got: list = []

    def keep(sources: list) -> list:
        got.extend(sources)
        if keep.calls == 1:  # the forward's sources came first: these are the backward's
            with open(out, "wb") as f:
                pickle.dump(got, f)
            os._exit(0)
        keep.calls += 1
        return [lambda *a: None for _ in sources]

    keep.calls = 0
    launch.compile_sources = keep
    torch.manual_seed(0)
    model = _resnet50().train().to(torch.bfloat16)
    x = torch.randn(16, 3, 224, 224, dtype=torch.bfloat16)

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).float().sum()
        loss.backward()
        return loss

    backend = sdk.backend("cuda_triton", channels_last=layout == "channels_last")
    torch.compile(step, backend=backend)(x)
    raise SystemExit("the backward was not compiled")


def _kernels(src):
    """(entry, constexprs, options, pointer dtypes) of each Triton kernel of one source."""
    from sdk.plugins.cuda_triton import launch

    meta = src.meta
    dtypes = [dt for _n, _s, dt, _r in meta["args"]]
    consts, opts = launch._split_config(meta, meta["config"], meta["constexprs"])
    if meta["mode"] != "split":
        return [(src.entry, consts, opts, dtypes)]
    kinds = {"main": (consts, opts)}
    for kind in ("pre", "flat"):
        if kind in meta:
            kinds[kind] = launch._split_config(meta, meta["config"][kind], meta[kind]["constexprs"])
    both = dtypes + [dt for _n, dt in meta["scratch"]]
    return [(fn, *kinds[kind], both) for fn, kind in meta["chain"]]


def _body(src) -> str:
    """The source with the kernels' and their pointer arguments' names made positional."""
    text = "\n".join(ln for ln in src.source.splitlines() if not ln.startswith("#"))
    names = [src.entry, *(fn for fn, _k in src.meta.get("chain", []))]
    for i, n in enumerate(sorted(set(names), key=len, reverse=True)):
        text = re.sub(rf"\b{re.escape(n)}\b", f"KERNEL{i}", text)
    order: dict[str, str] = {}
    return re.sub(r"\b\w+_ptr\b", lambda m: order.setdefault(m.group(0), f"P{len(order)}"), text)


def cost(path: str) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import type_canonicalisation_dict as triton_type

    from sdk.plugins.cuda_triton import launch

    with open(path, "rb") as f:
        sources = pickle.load(f)  # noqa: S301 - written by this script's own child
    target = GPUTarget("cuda", 90, 32)
    secs: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    bodies: dict[str, int] = {}
    for src in sources:
        mod = launch.load_module(src.source)
        ks = _kernels(src)
        # (the same text compiles once per launch configuration and argument dtypes)
        bodies[repr((_body(src), src.meta["config"], [k[3] for k in ks]))] = len(ks)
        for fn, consts, opts, dtypes in ks:
            jit = getattr(mod, fn)
            ptrs = iter(dtypes)
            sig = {
                p.name: "constexpr" if p.is_constexpr else "*" + triton_type[next(ptrs)]
                for p in jit.params
            }
            attrs = {
                (i,): [["tt.divisibility", 16]]
                for i, p in enumerate(jit.params)
                if not p.is_constexpr
            }
            t = time.perf_counter()
            triton.compile(
                ASTSource(jit, sig, {k: v for k, v in consts.items() if k in sig}, attrs),
                target=target,
                options=opts,
            )
            secs[src.meta["mode"]] += time.perf_counter() - t
            count[src.meta["mode"]] += 1
    return {
        "sources": len(sources),
        "kernels": sum(count.values()),
        "seconds": sum(secs.values()),
        "by_kind": {k: (count[k], secs[k]) for k in count},
        "distinct_kernels": sum(bodies.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        capture(*args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SDK_CACHE_DIR": os.path.join(tmp, "sdk")}
        env.pop("TRITON_INTERPRET", None)
        os.environ.update(
            SDK_CACHE_DIR=env["SDK_CACHE_DIR"], TRITON_CACHE_DIR=os.path.join(tmp, "triton")
        )
        for layout in ("channels_last", "nchw"):
            out = os.path.join(tmp, f"{layout}.pkl")
            subprocess.run([sys.executable, __file__, "--child", layout, out], env=env, check=True)
            r = cost(out)
            print(
                f"{layout}: {r['sources']} sources, {r['kernels']} Triton kernels, {r['seconds']:.1f} s "
                f"serial for sm_90; {r['distinct_kernels']} kernels distinct up to names"
            )
            for kind, (n, s) in sorted(r["by_kind"].items(), key=lambda kv: -kv[1][1]):
                print(f"  {kind:12s} {n:4d} kernels {s:6.1f} s ({s / n:.3f} s each)")


if __name__ == "__main__":
    main()
