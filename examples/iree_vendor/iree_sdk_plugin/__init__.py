"""IREE as a graph-level torch-backend-sdk plugin: ``torch.compile(m, backend="sdk:iree_cpu")``.

Hook API 3: the core partitions each ATen graph from ``sdk_claim_nodes`` and hands each
partition this plugin claimed to ``sdk_compile_subgraph``; ``sdk_load_subgraph`` rebuilds one
from the whole-graph cache without running the compiler.

Claims are a real legality test, not a list: the whole graph is taken through IREE's torch
input path (``--compile-to=input``); if that fails, each (op, argument dtypes/ranks) is, alone,
once per process.
"""

from __future__ import annotations

import json
import platform

import torch
from iree.compiler import version as compiler_version

import sdk
from sdk.cache import source_digest

from . import compiler

__version__ = "0.1.0"

#: The hook-API version this plugin was written against (a literal; see acme_vendor).
HOOK_API = 3

_legal: dict[tuple, str | None] = {}


@sdk.hookimpl
def sdk_plugin_info() -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name="iree_cpu",
        version=__version__,
        hook_api=HOOK_API,
        device_types=("cpu",),
        kind=sdk.PluginKind.GRAPH,
        description="IREE (llvm-cpu) compiling whole ATen subgraphs",
    )


def _signature(node: torch.fx.Node) -> tuple:
    """What a node's legality depends on: the op and its tensor arguments' dtypes and ranks."""
    args = tuple(
        (a.meta["val"].dtype, a.meta["val"].dim())
        for a in node.all_input_nodes
        if isinstance(a.meta.get("val"), torch.Tensor)
    )
    return (node.target, args, repr(node.args), repr(node.kwargs))


def _reason(node: torch.fx.Node) -> str | None:
    """Why IREE cannot take ``node`` (None: it can), cached per signature in this process."""
    key = _signature(node)
    if key not in _legal:
        _legal[key] = compiler.lowers(node)
    return _legal[key]


@sdk.hookimpl
def sdk_claim_nodes(ctx: sdk.CompileContext, gm: torch.fx.GraphModule):
    if ctx.plugin != "iree_cpu":
        return None
    whole = compiler.legal_graph(gm)  # one check for the graph: most graphs pass whole
    claims = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target.__name__ == "getitem":  # follows the multi-output op it reads
            source = node.args[0]
            claims[node] = claims.get(source, sdk.Support.no("its source is not claimed"))
            continue
        reason = compiler.tensor_valued(node) or (None if whole else _reason(node))
        claims[node] = sdk.Support.yes() if reason is None else sdk.Support.no(reason)
    return claims


def _pack(vmfb: bytes, where: list[int | None]) -> bytes:
    """The cache artifact: the output map as one JSON line, then the vmfb."""
    return json.dumps(where).encode() + b"\n" + vmfb


@sdk.hookimpl
def sdk_compile_subgraph(ctx: sdk.CompileContext, gm: torch.fx.GraphModule, example_inputs):
    if ctx.plugin != "iree_cpu":
        return None
    vmfb, where = compiler.compile_vmfb(gm)
    return sdk.CompiledSubgraph(fn=compiler.load(vmfb, where), artifact=_pack(vmfb, where))


@sdk.hookimpl
def sdk_load_subgraph(ctx: sdk.CompileContext, artifact: bytes):
    if ctx.plugin != "iree_cpu":
        return None
    header, vmfb = artifact.split(b"\n", 1)
    return compiler.load(vmfb, json.loads(header))


def _cache_key() -> str:
    """Compiler version, flags, the host CPU (target-cpu=host ties the code to it) and this
    plugin's own sources."""
    return (
        f"iree {compiler_version.VERSION} {' '.join(compiler.COMPILE_FLAGS)} "
        f"{platform.machine()} {platform.processor()} {source_digest(__name__)}"
    )


@sdk.hookimpl
def sdk_cache_key(ctx: sdk.CompileContext):
    return _cache_key() if ctx.plugin == "iree_cpu" else None
