"""TorchScript as a graph-level torch-backend-sdk plugin: ``backend="sdk:torchscript_cpu"``.

Hook API 3. Each partition the core hands over (a GraphModule of ATen ops) is traced with
``torch.jit.trace`` on real tensors of the example inputs' sizes, strides and dtypes, and run
by the TorchScript interpreter, a second runtime that ships with torch. The traced module is
the cache artifact (``torch.jit.save``); ``sdk_load_subgraph`` loads it back.

Written from the SDK's README, docs/vendor-guide.md, sdk/hookspecs.py, sdk/plugin.py and
examples/ alone, as a vendor would.
"""

from __future__ import annotations

import io
import json
import operator
from collections.abc import Sequence
from typing import Any

import torch

import sdk
from sdk.cache import source_digest

__version__ = "0.1.0"

#: The hook-API version this plugin was written against (a literal).
HOOK_API = 3

NAME = "torchscript_cpu"

#: Ops TorchScript's tracer cannot record faithfully: random ops would be frozen to the
#: values drawn while tracing; in-place writes to inputs are not a partition's business.
REFUSED = frozenset({"native_dropout", "rand", "rand_like", "randn", "randn_like", "bernoulli"})


@sdk.hookimpl
def sdk_plugin_info() -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name=NAME,
        version=__version__,
        hook_api=HOOK_API,
        device_types=("cpu",),
        kind=sdk.PluginKind.GRAPH,
        description="TorchScript (torch.jit.trace) running whole ATen subgraphs",
    )


@sdk.hookimpl
def sdk_plugin_status() -> str | None:
    return None


@sdk.hookimpl
def sdk_keep_ops(ctx: sdk.CompileContext):
    """Ops TorchScript runs whole, faster than the core's decompositions of them; their
    backward ops are kept with them (``gelu_backward``, ``_softmax_backward_data``).
    Not ``native_layer_norm``: the tracer cannot record its backward's ``bool[]``
    argument, so it stays decomposed."""
    if ctx.plugin != NAME:
        return None
    aten = torch.ops.aten
    return [aten.gelu, aten._softmax, aten._log_softmax]


def _is_tensors(val: object) -> bool:
    if isinstance(val, torch.Tensor):
        return True
    if isinstance(val, (tuple, list)) and val:
        return all(isinstance(v, torch.Tensor) for v in val)
    return False


def _refusal(node: torch.fx.Node) -> str | None:
    """Why TorchScript does not take ``node`` (None: it does)."""
    if node.target is operator.getitem:
        return None  # follows its multi-output source (below)
    name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
    if name in REFUSED:
        return f"{NAME} does not trace {name}: the values drawn while tracing would be frozen"
    if name.endswith("_") or (
        isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
    ):
        return f"{NAME} does not take {name}: it writes one of its inputs"
    if not _is_tensors(node.meta.get("val")):
        return f"{NAME} takes tensor-valued ops only ({name} makes {type(node.meta.get('val')).__name__})"
    return None


@sdk.hookimpl
def sdk_claim_nodes(ctx: sdk.CompileContext, gm: torch.fx.GraphModule):
    if ctx.plugin != NAME:
        return None
    claims: dict[torch.fx.Node, sdk.Support] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:
            source = claims.get(node.args[0])
            ok = source is not None and source.ok
            claims[node] = sdk.Support.yes() if ok else sdk.Support.no("its source is not claimed")
            continue
        reason = _refusal(node)
        claims[node] = sdk.Support.yes() if reason is None else sdk.Support.no(reason)
    return claims


def _real(example: Any) -> Any:
    """A real tensor of the example's size, stride and dtype (values do not matter to a
    trace of ATen ops, but must be valid: integer tensors may be indices, so they are 0);
    ints stay ints."""
    if isinstance(example, torch.Tensor):
        for size in (*example.shape, *example.stride()):
            if not isinstance(size, int):
                raise TypeError(f"{NAME} compiles concrete shapes only, got {tuple(example.shape)}")
        out = torch.empty_strided(
            tuple(example.shape), tuple(example.stride()), dtype=example.dtype, device="cpu"
        )
        if out.is_floating_point() or out.is_complex():
            out.uniform_(0.5, 1.5)
        else:
            out.zero_()
        return out
    if isinstance(example, torch.SymInt):
        raise TypeError(f"{NAME} compiles concrete shapes only, got the symbolic size {example}")
    return example


class _Outputs(torch.nn.Module):
    """``gm`` with its ``None`` outputs left out (a trace returns tensors only)."""

    def __init__(self, gm: torch.fx.GraphModule, keep: list[int]) -> None:
        super().__init__()
        self.gm = gm
        self.keep = keep

    def forward(self, *args: Any) -> tuple:
        out = self.gm(*args)
        return tuple(out[i] for i in self.keep)


def _runner(module: torch.jit.ScriptModule, where: list[int | None], threads: int | None):
    """Call the traced module and put the ``None`` outputs back in their places."""

    def run(*args: Any) -> tuple:
        previous = torch.get_num_threads()
        if threads and threads != previous:
            torch.set_num_threads(threads)
        try:
            got = module(*args)
        finally:
            if threads and threads != previous:
                torch.set_num_threads(previous)
        if isinstance(got, torch.Tensor):
            got = (got,)
        return tuple(None if i is None else got[i] for i in where)

    return run


def _threads(ctx: sdk.CompileContext) -> int | None:
    """The intra-op thread count the SDK asks the plugin to use (``ctx.threads``:
    ``torch.get_num_threads()`` when the compile began; 0 or absent: torch's own)."""
    return getattr(ctx, "threads", 0) or None


def compile_partition(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]):
    """Trace one partition: (ScriptModule, where each output of ``gm`` is in its result)."""
    args = [_real(e) for e in example_inputs]
    outs = gm(*args)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    keep = [i for i, o in enumerate(outs) if o is not None]
    where: list[int | None] = []
    for o in outs:
        where.append(None if o is None else len([w for w in where if w is not None]))
    module = torch.jit.trace(_Outputs(gm, keep), tuple(args), check_trace=False, strict=False)
    return module, where


def _pack(module: torch.jit.ScriptModule, where: list[int | None]) -> bytes:
    buf = io.BytesIO()
    torch.jit.save(module, buf)
    return json.dumps(where).encode() + b"\n" + buf.getvalue()


@sdk.hookimpl
def sdk_compile_subgraph(ctx: sdk.CompileContext, gm: torch.fx.GraphModule, example_inputs):
    if ctx.plugin != NAME:
        return None
    module, where = compile_partition(gm, example_inputs)
    return sdk.CompiledSubgraph(
        fn=_runner(module, where, _threads(ctx)), artifact=_pack(module, where)
    )


@sdk.hookimpl
def sdk_load_subgraph(ctx: sdk.CompileContext, artifact: bytes):
    if ctx.plugin != NAME:
        return None
    header, body = artifact.split(b"\n", 1)
    module = torch.jit.load(io.BytesIO(body))
    return _runner(module, json.loads(header), _threads(ctx))


@sdk.hookimpl
def sdk_cache_key(ctx: sdk.CompileContext) -> str | None:
    if ctx.plugin != NAME:
        return None
    return f"torchscript {torch.__version__} {source_digest(__name__)}"
