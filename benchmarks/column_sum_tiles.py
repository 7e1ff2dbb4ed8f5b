"""BatchNorm's backward sums over channels-last rows, as hand-written Triton kernels in the
form of cuda_triton's split first kernel: its tile, warps, chunk, masks and L2 eviction hints
varied one at a time, beside nothing else, to find what a setting of the plugin should be.

    python benchmarks/column_sum_tiles.py OUT.json        # a GPU; DEV=cpu TRITON_INTERPRET=1 checks only

Each case is ``[rows, C]`` channels-last data (ResNet-50's BatchNorm shapes at batch 16: the
ReLU mask, the gradient and the input, as the backward reads them), reduced to two sums per
channel (``sum(g)``, ``sum(g * (x - mean))``) with the partials of each chunk stored, as the
sdk's first kernel does (the combine is not timed). ``sums_us``: the kernel alone, L2
flushed (``triton.testing.do_bench``); ``pair_us``: the kernel and then an input-gradient
kernel that reads the same three tensors, as the step runs them. Every variant's sums are
checked against torch's. The variants are settings of the plugin
(``SPLIT_OUTER_XBLOCK``, ``SPLIT_OUTER_TILE``, ``SPLIT_OUTER_WARPS``, the chunk, which
``SPLIT_OUTER_TARGET_PROGRAMS`` and ``SPLIT_OUTER_MIN_CHUNK`` set, ``EVICTION_HINTS``), not
a kernel the plugin runs: ``bn_chains.py`` and ``column_sums.py`` time the plugin's own.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import triton

DEV = os.environ.get("DEV", "cuda")
CHECK_ONLY = DEV != "cuda"  # Triton's interpreter: the kernels' sums checked, nothing timed
SHAPES = [(200704, 64), (50176, 256), (12544, 512), (3136, 256), (784, 2048)]
SMALL = [(784, 64), (392, 256)]
# (XBLOCK, RBLOCK, warps): the plugin's default [32, 128] x 8 first, Inductor's [64, 8] x 4
TILES = [(32, 128, 8), (64, 8, 4), (64, 32, 4), (32, 32, 4), (64, 64, 8), (16, 128, 4)]
CHUNKS = (196, 784, 1568)

TEMPLATE = """
import triton
import triton.language as tl

@triton.jit
def sums(le_ptr, dy_ptr, x_ptr, mean_ptr, p0, p1, TOTAL: tl.constexpr, C: tl.constexpr, CHUNK: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(1) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < C
    split = tl.program_id(0)
    rbase = tl.arange(0, RBLOCK)[None, :]
    m = tl.load(mean_ptr + xindex, xmask, other=0)
    a0 = tl.full([XBLOCK, RBLOCK], 0, tl.float32)
    a1 = tl.full([XBLOCK, RBLOCK], 0, tl.float32)
    for roffset in range(0, CHUNK, RBLOCK):
        rlocal = roffset + rbase
        rindex = split * CHUNK + rlocal
        rmask = MASK
        le = tl.load(le_ptr + (C * rindex + xindex), xmask & rmask, other=0EP)
        dy = tl.load(dy_ptr + (C * rindex + xindex), xmask & rmask, other=0EP).to(tl.float32)
        g = tl.where(le, 0.0, dy).to(tl.bfloat16).to(tl.float32)
        a0 = a0 + tl.where(rmask, g, 0)
        x = tl.load(x_ptr + (C * rindex + xindex), xmask & rmask, other=0EP).to(tl.float32)
        a1 = a1 + tl.where(rmask, g * (x - m), 0)
    tl.store(p0 + split * C + xindex, tl.sum(a0, 1)[:, None], xmask)
    tl.store(p1 + split * C + xindex, tl.sum(a1, 1)[:, None], xmask)

@triton.jit
def flat(le_ptr, dy_ptr, x_ptr, mean_ptr, s0, s1, out_ptr, TOTAL: tl.constexpr, C: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(1) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < C
    rindex = tl.program_id(0) * RBLOCK + tl.arange(0, RBLOCK)[None, :]
    rmask = rindex < TOTAL
    m = tl.load(mean_ptr + xindex, xmask, other=0)
    a = tl.load(s0 + xindex, xmask, other=0) * 1e-6
    b = tl.load(s1 + xindex, xmask, other=0) * 1e-6
    le = tl.load(le_ptr + (C * rindex + xindex), xmask & rmask, other=0)
    dy = tl.load(dy_ptr + (C * rindex + xindex), xmask & rmask, other=0).to(tl.float32)
    x = tl.load(x_ptr + (C * rindex + xindex), xmask & rmask, other=0).to(tl.float32)
    g = tl.where(le, 0.0, dy).to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + (C * rindex + xindex), ((g - (x - m) * b - a)).to(tl.bfloat16), xmask & rmask)
"""
MASKS = {"full": "(rlocal < CHUNK) & (rindex < TOTAL)", "chunk": "rlocal < CHUNK"}
EPS = {
    "none": "",
    "first": ", eviction_policy='evict_first'",
    "last": ", eviction_policy='evict_last'",
}
_modules: dict = {}


def module(mask: str, ep: str):
    """The two kernels with one mask and eviction policy, imported from a file (Triton's JIT
    reads a kernel's source from its file)."""
    if (mask, ep) not in _modules:
        src = TEMPLATE.replace("MASK", MASKS[mask]).replace("EP", EPS[ep])
        path = Path(tempfile.mkdtemp()) / f"k_{mask}_{ep}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _modules[mask, ep] = mod
    return _modules[mask, ep]


def _variant(mod, t, cfg):
    """(run the sums, run the sums then the input gradient) on the tensors ``t``, for
    ``cfg`` = (XBLOCK, RBLOCK, warps, chunk)."""
    xb, rb, w, chunk = cfg
    total, c = t["dy"].shape
    split, cols = total // chunk, min(64, c)

    def sums():
        mod.sums[(split, triton.cdiv(c, xb))](
            t["le"], t["dy"], t["x"], t["mean"], t["p0"], t["p1"], total, c, chunk, xb, rb,
            num_warps=w,
        )  # fmt: skip

    def pair():
        sums()
        grid = (triton.cdiv(total, 1024 // cols), triton.cdiv(c, cols))
        mod.flat[grid](
            t["le"], t["dy"], t["x"], t["mean"], t["p0"][0], t["p1"][0], t["dx"], total, c,
            cols, 1024 // cols, num_warps=4,
        )  # fmt: skip

    return sums, pair


def main(out_path: str) -> None:
    from triton.testing import do_bench

    out = []
    for total, c in SMALL if CHECK_ONLY else SHAPES:
        le = torch.rand(total, c, device=DEV) < 0.5
        dy = torch.randn(total, c, device=DEV, dtype=torch.bfloat16)
        x = torch.randn(total, c, device=DEV, dtype=torch.bfloat16)
        mean = torch.randn(c, device=DEV)
        g = torch.where(le, 0.0, dy.float()).to(torch.bfloat16).float()
        ref0, ref1 = g.sum(0), (g * (x.float() - mean)).sum(0)
        tensors = {"le": le, "dy": dy, "x": x, "mean": mean, "dx": torch.empty_like(dy)}
        configs = [
            (*tile, chunk)
            for tile in TILES
            for chunk in CHUNKS
            if chunk <= total and total % chunk == 0
        ]
        variants = itertools.product(configs, ["full", "chunk"], ["none", "first", "last"])
        for cfg, mask, ep in variants:
            if mask == "chunk" and ep != "first":
                continue
            tensors["p0"] = torch.empty(total // cfg[3], c, device=DEV)
            tensors["p1"] = torch.empty_like(tensors["p0"])
            sums, pair = _variant(module(mask, ep), tensors, cfg)
            sums()
            ok = torch.allclose(tensors["p0"].sum(0), ref0, rtol=1e-3, atol=1e-1)
            ok = ok and torch.allclose(tensors["p1"].sum(0), ref1, rtol=1e-3, atol=1e-1)
            xb, rb, w, chunk = cfg
            row = {"total": total, "c": c, "xb": xb, "rb": rb, "w": w, "chunk": chunk}
            row.update(split=total // chunk, mask=mask, ep=ep, ok=bool(ok))
            if not CHECK_ONLY:
                row["sums_us"] = round(do_bench(sums, warmup=10, rep=40) * 1e3, 2)
                row["pair_us"] = round(do_bench(pair, warmup=10, rep=40) * 1e3, 2)
            out.append(row)
            print(json.dumps(row), flush=True)
            if not ok:
                raise SystemExit(f"wrong sums: {row}")
        Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
