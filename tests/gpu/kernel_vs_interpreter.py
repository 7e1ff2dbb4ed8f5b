"""One generated kernel, re-run alone on the GPU and under Triton's interpreter, at several warp
counts: is a wrong result Triton's compile of the kernel, or ours?

    python tests/gpu/kernel_vs_interpreter.py --dtype bfloat16 \
        --shape 2,8,7,6 [--warps 1,2,4,8] [--fusion-veto off]

Compiles the ``stem`` case (BatchNorm, ReLU, a 3x3 stride-2 max pool, NCHW, trained) with
sdk:cuda_triton, catches the first launch of a kernel whose name holds
``--kernel`` (its arguments copied before it runs), then launches that kernel's source again
on copies of the arguments: on the GPU at each warp count, and under the interpreter on the
CPU. Prints, per warp count, which arguments differ from the interpreter's and in how many
elements. A kernel that differs at some warp counts and not at others, and not under the
interpreter, is miscompiled (how Triton 3.6's wrong BatchNorm gradients were found:
``FusionGroup.gathers_along_reduction``). ``--fusion-veto off`` drops cuda_triton's veto of
such fusions, to re-check a newer Triton on the kernel that found it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from triton.runtime import jit as triton_jit

import sdk


def _stem(x, w, b):
    return F.max_pool2d(F.relu(F.batch_norm(x, None, None, w, b, training=True)), 3, 2, 1)


def _catch(fragment: str) -> dict:
    """Patch Triton's launches (compiled and interpreted) to copy the first real launch of a
    kernel whose name holds ``fragment``."""
    from triton.runtime.interpreter import InterpretedFunction

    caught: dict = {}

    def patch(cls) -> None:
        run = cls.run

        def catching(self, *args, **kw):
            name = getattr(self, "__name__", "") or getattr(self.fn, "__name__", "")
            mock = any(type(a).__name__ == "MockTensor" for a in args)
            if fragment in name and not caught and not kw.get("warmup") and not mock:
                copies = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
                meta = {k: v for k, v in kw.items() if k not in ("grid", "warmup")}
                caught.update(name=name, args=copies, meta=meta, grid=kw["grid"])
            return run(self, *args, **kw)

        cls.run = catching

    patch(triton_jit.JITFunction)
    patch(InterpretedFunction)
    return caught


def _load(source: str, name: str, interpret: bool):
    """The jitted function ``name`` of ``source``, compiled or interpreted."""
    path = os.path.join(tempfile.mkdtemp(), f"{name}_{int(interpret)}.py")
    with open(path, "w") as f:
        f.write(source)
    before = os.environ.pop("TRITON_INTERPRET", None)
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
        if before is not None:
            os.environ["TRITON_INTERPRET"] = before
    return getattr(module, name)


def _launch(fn, caught: dict, device: str, **meta: int) -> list[torch.Tensor]:
    args = [a.clone().to(device) if isinstance(a, torch.Tensor) else a for a in caught["args"]]
    grid = caught["grid"]
    grid = grid(dict(caught["meta"])) if callable(grid) else grid
    fn[grid](*args, **{**caught["meta"], **meta})
    if device == "cuda":
        torch.cuda.synchronize()
    return [a.cpu() for a in args if isinstance(a, torch.Tensor)]


def _differ(got: list[torch.Tensor], want: list[torch.Tensor]) -> list[tuple[int, int, int]]:
    """(argument, elements that differ, elements) per argument that differs."""
    rows = []
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if a.is_floating_point():
            tol = (
                dict(rtol=1e-4, atol=1e-5)
                if a.dtype == torch.float32
                else dict(rtol=2e-2, atol=2e-2)
            )
            bad = int((~torch.isclose(a.float(), b.float(), **tol)).sum())
        else:
            bad = int((a != b).sum())
        if bad:
            rows.append((i, bad, a.numel()))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--kernel", default="max_pool2d_with_indices_backward", help="a fragment of its name"
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--shape", default="2,8,7,6", help="N,C,H,W")
    p.add_argument("--warps", default="1,2,4,8")
    p.add_argument("--fusion-veto", choices=("on", "off"), default="on")
    a = p.parse_args(argv)
    if torch.cuda.is_available():
        dev = "cuda"
    elif os.environ.get("TRITON_INTERPRET") == "1":
        dev = "cpu"  # the interpreter against itself: a check of this script, not of Triton
        print("kernel_vs_interpreter: no CUDA device; the 'GPU' launches are interpreted too")
    else:
        print("kernel_vs_interpreter: needs a CUDA device (or TRITON_INTERPRET=1)", file=sys.stderr)
        return 2
    if a.fusion_veto == "off":
        from sdk.plugins import cuda_triton

        # (read when the plugin registers, on the first compile below)
        cuda_triton.sdk_can_fuse = sdk.hookimpl(lambda ctx, first, second, merged: None)
    n, c, h, w = (int(v) for v in a.shape.split(","))
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(0)
    x = torch.argsort(torch.rand(c, n * h * w), dim=1).reshape(c, n, h, w).transpose(0, 1)
    inputs = [
        x.to(dev, dtype).contiguous(),
        (torch.rand(c, device=dev) + 1).to(dtype),
        torch.randn(c, device=dev).to(dtype),
    ]
    caught = _catch(a.kernel)
    with sdk.collect_reports() as reports:
        compiled = torch.compile(_stem, backend=sdk.backend("cuda_triton", fallback=False))
        out = compiled(*[t.requires_grad_() for t in inputs])
        out.backward(torch.randn_like(out))
    if not caught:
        print(f"kernel_vs_interpreter: no launched kernel's name holds {a.kernel!r}")
        return 1
    sources = {k.name: k.source for g in reports.graphs for k in g.kernels}
    name = max((k for k in sources if caught["name"].startswith(k)), key=len)
    source = sources[name]
    print(f"{name}: launched with {caught['meta']}")
    print("\n".join(line for line in source.splitlines() if line.startswith("#")))
    want = _launch(_load(source, name, interpret=True), caught, "cpu")
    gpu = _load(source, name, interpret=dev == "cpu")
    for warps in (int(v) for v in a.warps.split(",")):
        rows = _differ(_launch(gpu, caught, dev, num_warps=warps), want)
        print(
            f"num_warps={warps}: "
            + (f"differs (argument, elements, of): {rows}" if rows else "same")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
