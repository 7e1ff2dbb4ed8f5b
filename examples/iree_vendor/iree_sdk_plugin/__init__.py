"""IREE as a graph-level torch-backend-sdk plugin: ``torch.compile(m, backend="sdk:iree_cpu")``.

Hook API 3: the core partitions each ATen graph from ``sdk_claim_nodes`` and hands each
partition this plugin claimed to ``sdk_compile_subgraph``; ``sdk_load_subgraph`` rebuilds one
from the whole-graph cache without running the compiler.

Claims are a real legality test, not a list: the whole graph is taken through IREE's torch
input path (``--compile-to=input``); if that fails, each (op, argument dtypes/ranks) is, alone,
once per process. The verdicts are kept in the per-user cache (namespace ``iree-claims``): a
warm process runs no compiler at all, for claims or for code.
"""

from __future__ import annotations

import json
import platform

import torch
from iree.compiler import version as compiler_version

import sdk
import sdk.cache
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
        # IREE compiles dynamic dimensions: symbolic partitions, one program for every size
        capabilities=frozenset({sdk.Capability.SYMBOLIC_SIZES}),
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
    key = _claims_key(gm)
    stored = _claims_store().get(key)
    if stored is not None:  # a warm process: the verdicts of an earlier one, no compiler run
        reasons = json.loads(stored)
    else:
        reasons = _verdicts(gm)
        _claims_store().put(key, json.dumps(reasons).encode())
    return {
        node: sdk.Support.yes()
        if reasons.get(node.name) is None
        else sdk.Support.no(reasons[node.name])
        for node in gm.graph.nodes
        if node.op == "call_function"
    }


def _verdicts(gm: torch.fx.GraphModule) -> dict[str, str | None]:
    """Each call node's refusal reason (None: claimed)."""
    whole = compiler.legal_graph(gm)  # one check for the graph: most graphs pass whole
    reasons: dict[str, str | None] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target.__name__ == "getitem":  # follows the multi-output op it reads
            source = reasons.get(node.args[0].name, "its source is not claimed")
            reasons[node.name] = None if source is None else "its source is not claimed"
            continue
        reasons[node.name] = compiler.tensor_valued(node) or (None if whole else _reason(node))
    return reasons


def _claims_key(gm: torch.fx.GraphModule) -> str:
    """What the verdicts depend on: the graph, its values' shapes and dtypes, the compiler."""
    vals = [(n.name, _describe(n.meta.get("val"))) for n in gm.graph.nodes]
    return sdk.cache.stable_hash("claims", _cache_key(), gm.code, repr(vals))


def _describe(val: object) -> object:
    if isinstance(val, torch.Tensor):
        return (tuple(str(d) for d in val.shape), str(val.dtype))
    if isinstance(val, (tuple, list)):
        return [_describe(v) for v in val]
    return repr(val)


def _claims_store() -> sdk.cache.DiskCache:
    return sdk.cache.DiskCache("iree-claims")


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
