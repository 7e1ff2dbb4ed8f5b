"""Channels-last BatchNorm (training) alone: the sdk's kernels beside Inductor's and eager's,
by kernel, one process.

    python benchmarks/bn_chains.py [--json FILE] [--shapes 16x64x112x112,16x256x14x14]

Each case is a bf16 channels-last ``[N, C, H, W]`` input through ``batch_norm`` in training
mode and a ReLU, forward and backward (``fwd+bwd``), as in a ResNet-50 training step at
batch 16. Beside the ATen op, two hand-written forms of the same normalization (no running
statistics) show what the statistics' passes cost:

* ``two-pass``: the mean, then the mean of squared deviations, as the sdk lowers ``var_mean``;
* ``shifted``: one pass of two sums about the channel's first element (the shifted-data
  variance), then the normalization;
* ``stem``: the ATen op, the ReLU and ResNet's 3x3 stride-2 max pool after them (at
  16x64x112x112: the stem of a ResNet-50 training step), whose gradient BatchNorm's backward
  reads.

Every backend compiles afresh, from empty cache directories; its output and gradients are checked against fp64 on fresh
random inputs, and its kernels' device time is read from ``torch.profiler`` over 20 calls.
The table printed last has one line per case and form: device microseconds a call by
backend, and the sdk's kernels a call.

``--settings label:NAME=V+NAME=V,...`` compiles the sdk once more per setting, with those
``sdk.plugins.cuda_triton.heuristics`` constants (``default`` is the plugin as it is):

    python benchmarks/bn_chains.py --forms aten --settings default,x64:SPLIT_OUTER_XBLOCK=64

Inductor's choice for these column sums (``reduction_split_factor`` and the ``OUTER``
reduction config of torch 2.11, read off its source): chunks of about 196 rows (64 channels
of 16x112x112 split 1024 ways), [64 channels, 8 rows] tiles, 4 warps. The same in the sdk's
constants, for its chains (all their kernels take the tile):

    --settings default,ind:SPLIT_OUTER_XBLOCK=64+SPLIT_OUTER_TILE=512+SPLIT_OUTER_WARPS=4+SPLIT_OUTER_MIN_CHUNK=12544+SPLIT_OUTER_TARGET_PROGRAMS=1024
"""

from __future__ import annotations

import argparse
import contextlib
import json

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import sdk
import sdk.cache
from sdk.tools.bench_launches import kernel_times

SHAPES = "16x64x112x112,16x64x56x56,16x256x56x56,16x128x28x28,16x512x28x28,16x256x14x14,16x1024x14x14,16x512x7x7,16x2048x7x7"
CALLS = 20


def aten_bn(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True).relu()


def two_pass(x, w, b):
    xf = x.float()
    mean = xf.mean((0, 2, 3), keepdim=True)
    var = ((xf - mean) ** 2).mean((0, 2, 3), keepdim=True)
    y = (xf - mean) * torch.rsqrt(var + 1e-5) * w.float()[:, None, None] + b.float()[:, None, None]
    return y.to(x.dtype).relu()


def shifted(x, w, b):
    xf = x.float()
    n = xf.numel() // xf.shape[1]
    k = xf[:1, :, :1, :1]
    d = xf - k
    s1 = d.sum((0, 2, 3), keepdim=True)
    s2 = (d * d).sum((0, 2, 3), keepdim=True)
    mean = k + s1 / n
    var = (s2 - s1 * s1 / n) / n
    y = (xf - mean) * torch.rsqrt(var + 1e-5) * w.float()[:, None, None] + b.float()[:, None, None]
    return y.to(x.dtype).relu()


def stem(x, w, b):
    """ResNet's stem after its convolution: BatchNorm, ReLU, a 3x3 stride-2 max pool (the
    pool's gradient gathered from the windows holding each element, in the backward)."""
    return F.max_pool2d(aten_bn(x, w, b), 3, 2, 1)


FORMS = {"aten": aten_bn, "two-pass": two_pass, "shifted": shifted, "stem": stem}


def _inputs(shape, dev, form="aten"):
    x = torch.randn(*shape, device=dev).to(torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(shape[1], device=dev).to(torch.bfloat16)
    b = torch.randn(shape[1], device=dev).to(torch.bfloat16)
    out = FORMS[form](x[:1], w, b).shape[2:]  # (the pooled size, for the stem)
    g = torch.randn(*shape[:2], *out, device=dev).to(torch.bfloat16)
    return x, w, b, g.to(memory_format=torch.channels_last)


def _step(fn, x, w, b, g):
    xs = [t.detach().requires_grad_() for t in (x, w, b)]
    out = fn(*xs)
    out.backward(g)
    return out, [t.grad for t in xs]


def _kernels(fn, args) -> tuple[float, int, dict]:
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            _step(fn, *args)
        torch.cuda.synchronize()
    per = kernel_times(prof.events())
    total = sum(us for _c, us in per.values()) / CALLS
    launches = sum(c for c, _us in per.values()) // CALLS
    return total, launches, {n: [c // CALLS, round(us / CALLS, 2)] for n, (c, us) in per.items()}


def _check(fn, compiled, args) -> str:
    x, w, b, g = args
    out, grads = _step(compiled, x, w, b, g)
    ref, rgrads = _step(fn, *(t.double() for t in (x, w, b)), g.double())
    worst = 0.0
    for got, want in zip([out, *grads], [ref, *rgrads]):
        err = (got.double() - want).norm() / want.norm().clamp_min(1e-30)
        worst = max(worst, float(err))
    return f"{worst:.1e}" + ("" if worst < 2e-2 else " MISMATCH")


@contextlib.contextmanager
def _setting(spec: str):
    """``label:NAME=V+NAME=V``: the heuristics constants set while the block runs."""
    from sdk.plugins.cuda_triton import heuristics

    _label, _, assigns = spec.partition(":")
    old = {}
    for a in filter(None, assigns.split("+")):
        name, _, value = a.partition("=")
        old[name] = getattr(heuristics, name)  # an unknown name raises here
        setattr(heuristics, name, int(value))
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(heuristics, name, value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--settings", default="default")
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    rows = []
    for spec in a.shapes.split(","):
        shape = tuple(int(s) for s in spec.split("x"))
        for form in a.forms.split(","):
            fn = FORMS[form]
            row: dict = {"shape": spec, "form": form}
            sides = ["eager", "inductor", *(f"sdk {st}" for st in a.settings.split(","))]
            for side in sides:
                be, _, setting = side.partition(" ")
                be = "sdk:cuda_triton" if be == "sdk" else be
                torch.manual_seed(0)
                args = _inputs(shape, dev, form)
                sdk.reset()
                torch._dynamo.reset()
                sdk.cache.fresh_directories()  # a setting's kernels never load another's
                with _setting(setting or "default"):
                    f = fn if be == "eager" else torch.compile(fn, backend=be)
                    for _ in range(3):
                        _step(f, *args)
                us, launches, kernels = _kernels(f, args)
                row[side] = {"us": us, "launches": launches, "kernels": kernels}
                row[side]["check"] = (
                    _check(fn, f, _inputs(shape, dev, form)) if be != "eager" else ""
                )
            cells = "  ".join(
                f"{side} {row[side]['us']:7.1f} ({row[side]['launches']}) {row[side]['check']}"
                for side in sides
            )
            print(f"{spec:>16} {form:>8}  {cells}", flush=True)
            rows.append(row)
            if a.json:  # after each row: a run stopped by its time limit keeps what it measured
                with open(a.json, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
