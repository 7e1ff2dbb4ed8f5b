"""CPU: the cudagraphs plugin's host work around a replay, without a GPU. A GPT-2-like
training step (the shapes of GPT-2 training under reduce-overhead): a forward graph of 150
inputs read in place and 92 outputs the next step reuses, and a backward graph of 150 inputs
and 109 gradients handed out new each step, which the "optimizer" keeps as ``.grad`` (a
detached alias, as AccumulateGrad does) and drops (``zero_grad(set_to_none=True)``). Each call runs the plugin's own checks and
``CudaGraphed._replay`` over a recording whose replay does nothing, so the figure is the
wrapper's Python and torch calls only. On CPU tensors a new output tensor is a ``set_``; on
CUDA it is one C++ call (the GPU's figure is in ``benchmarks/cudagraph_steps.py``).

    python benchmarks/cudagraph_wrapper_cpu.py [--profile]
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from typing import Any

import torch

import sdk
from sdk import runtime
from sdk.plugins import cudagraphs as cg

INPUTS, ACTIVATIONS, GRADIENTS = 150, 92, 109


class _NoGraph:
    def replay(self) -> None:
        pass


def _recording(dev: cg._Device, args: list[torch.Tensor], outs: list[torch.Tensor], bw: bool):
    # as CudaGraphed._record makes it: a backward's outputs are handed out new each step
    out = runtime.Outputs(outs, cg.STALE_GRAD if bw else cg.STALE, reuse=not bw, grad_ok=not bw)
    in_place = {i: a.data_ptr() for i, a in enumerate(args)}
    shapes = [a.shape for a in args]
    return cg._Recording(0, next(dev.order), _NoGraph(), in_place, {}, shapes, out, [])


def _call(graph: cg.CudaGraphed, rec: Any, dev: cg._Device, args: tuple) -> Any:
    """``CudaGraphed.__call__`` of a recorded graph, its checks in order (the host check
    aside: these are CPU tensors)."""
    _host, scalars, shapes = cg._scan(args)
    if not graph.backward:
        dev.begin()
    if graph._key(args, scalars) or shapes != rec.shapes or rec.moved(list(args)):
        raise AssertionError("the recording does not fit")
    blocked, scans = dev.check(rec)
    if blocked is not None:
        raise AssertionError(blocked)
    return graph._replay(rec, dev, args, scans)


def main(profile: bool) -> None:
    torch.manual_seed(0)
    params = [torch.randn(64, 64, requires_grad=True) for _ in range(INPUTS)]
    fw, bw = cg.CudaGraphed(lambda *a: None), cg.CudaGraphed(lambda *a: None)
    fw.forward, bw.backward = True, True
    dev = cg._Device()
    with torch.no_grad():
        args = tuple(p.detach() for p in params)
        rec_fw = _recording(
            dev, list(args), [torch.randn(64, 64) for _ in range(ACTIVATIONS)], False
        )
        rec_bw = _recording(dev, list(args), [torch.randn(64, 64) for _ in range(GRADIENTS)], True)

    def step() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            saved = _call(fw, rec_fw, dev, args)  # the activations, to the backward
            grads = _call(bw, rec_bw, dev, args)
        for p, g in zip(params, grads):
            p.grad = g.detach()  # what AccumulateGrad keeps
        del saved, grads
        for p in params:
            p.grad = None

    for _ in range(20):
        step()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            step()
        best = min(best, (time.perf_counter() - t0) / 200)
    print(f"sdk {sdk.__version__}: wrapper host time per step {best * 1e3:.3f} ms (best of 5)")
    if profile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(100):
            step()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main("--profile" in sys.argv)
