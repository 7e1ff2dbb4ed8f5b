"""CUDA graphs: a wrapper plugin that captures a compiled graph once and replays it.

Used by ``mode="reduce-overhead"`` or ``options={"wrappers": ["cudagraphs"]}``.
The graph's inputs are copied into static buffers before each replay; outputs
are cloned out of the graph's pool so a later replay cannot overwrite them.
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
    return CudaGraphed(inner)


class CudaGraphed:
    """Replays ``fn`` as a CUDA graph; re-records when input shapes change."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self._graphs: dict[tuple, tuple] = {}

    def _key(self, args: list[Any]) -> tuple:
        return tuple(
            (tuple(a.shape), tuple(a.stride()), a.dtype, a.device) if isinstance(a, torch.Tensor)
            else a for a in args)

    _boxed_call = True  # AOTAutograd may hand the inputs over as one list

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and type(args[0]) is list:
            args = tuple(args[0])
        if torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return self.fn(*args)  # autograd state cannot live in a graph
        key = self._key(args)
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._record(args)
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
