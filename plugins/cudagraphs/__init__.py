"""CUDA graphs: a wrapper plugin that captures a compiled graph once and replays it.

Used by ``mode="reduce-overhead"`` or ``options={"wrappers": ["cudagraphs"]}``.
The graph's inputs are copied into static buffers before each replay; outputs
are cloned out of the graph's pool so a later replay cannot overwrite them.

A graph that cannot be captured (a CPU tensor among its inputs, an op that
synchronizes with the host or copies from pageable memory) runs uncaptured,
every call, and says why through ``sdk.explain`` (``CompileContext.note``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

import sdk

__version__ = "0.1.0"


@sdk.hookimpl
def sdk_plugin_info() -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name="cudagraphs",
        version=__version__,
        hook_api=1,
        device_types=("cuda",),
        kind=sdk.PluginKind.WRAPPER,
        capabilities=frozenset({sdk.Capability.GRAPH_CAPTURE}),
        description="capture and replay compiled graphs with CUDA graphs",
    )


@sdk.hookimpl
def sdk_plugin_status() -> str | None:
    if not torch.cuda.is_available():
        return ("no CUDA device visible (torch.cuda.is_available() is False); "
                "use it on a machine with an NVIDIA GPU and a CUDA build of torch")
    return None


@sdk.hookimpl(wrapper=True)
def sdk_wrap_compiled(ctx: sdk.CompileContext, compiled: Callable[..., Any]):
    inner = yield
    return CudaGraphed(inner, ctx)


class CudaGraphed:
    """Replays ``fn`` as a CUDA graph; re-records when input shapes change."""

    def __init__(self, fn: Callable[..., Any], ctx: sdk.CompileContext | None = None) -> None:
        self.fn = fn
        self.ctx = ctx
        self._graphs: dict[tuple, tuple] = {}
        self.uncaptured: str | None = None  # why this graph runs uncaptured, once it does

    def _give_up(self, why: str) -> None:
        self.uncaptured = why
        self._graphs.clear()
        if self.ctx is not None:
            self.ctx.note(f"cudagraphs: runs uncaptured: {why}")

    def _key(self, args: list[Any]) -> tuple:
        return tuple(
            (tuple(a.shape), tuple(a.stride()), a.dtype, a.device) if isinstance(a, torch.Tensor)
            else a for a in args)

    _boxed_call = True  # AOTAutograd may hand the inputs over as one list

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and type(args[0]) is list:
            args = tuple(args[0])
        if self.uncaptured is not None:
            return self.fn(*args)
        if torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return self.fn(*args)  # autograd state cannot live in a graph
        key = self._key(args)
        entry = self._graphs.get(key)
        if entry is None:
            host = [i for i, a in enumerate(args)
                    if isinstance(a, torch.Tensor) and a.device.type != "cuda"]
            if host:
                self._give_up(f"input {host[0]} is a {args[host[0]].device.type} tensor; a "
                              "CUDA graph replays device work only")
                return self.fn(*args)
            try:
                entry = self._record(args)
            except Exception as exc:  # noqa: BLE001 - any capture failure: run uncaptured
                self._give_up(f"capture failed: {type(exc).__name__}: {exc}")
                return self.fn(*args)
            self._graphs[key] = entry
        graph, static_in, static_out = entry
        for dst, src in zip(static_in, args):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        graph.replay()
        return tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in static_out)

    def _record(self, args: list[Any]) -> tuple:
        static_in = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up: lazy compiles and allocator growth stay out
                self.fn(*static_in)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self.fn(*static_in)
        return graph, static_in, tuple(static_out)
