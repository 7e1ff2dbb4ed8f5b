"""The hooks of a graph-level plugin (``PluginKind.GRAPH``), which compiles whole
partitions of the ATen graph with its own compiler: which nodes it claims, a partition's
compile, and a partition's callable rebuilt from the whole-graph cache.

Part of the hook specification, :mod:`sdk.hookspecs`, which imports these hooks: pluggy reads
them there, and its doc says what an exception from a hook means and which hooks run in the
compile's fake mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sdk._hookspec import hookspec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch.fx import GraphModule, Node

    from sdk.context import CompileContext
    from sdk.subgraph import ClaimGroups, CompiledSubgraph, Support


# ---------------------------------------------------------------------------
# Graph-level plugins (PluginKind.GRAPH): the plugin compiles whole partitions
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_claim_nodes(
    ctx: CompileContext, gm: GraphModule
) -> Mapping[Node, Support] | ClaimGroups | None:
    """Which ATen call nodes of ``gm`` this graph-level plugin compiles.

    Called once per ATen graph (forward, backward or inference), after decompositions.
    ``node.meta["val"]`` holds fake tensors (symbolic sizes under dynamic shapes). The
    core partitions the graph from these claims: each node goes to the first plugin of
    the chain that claims it.

    Per node (hook API 3), the core makes the largest acyclic partitions of the claimed
    nodes. With :class:`sdk.ClaimGroups` (hook API 7) the plugin names its own partitions:
    each group is one partition, unless contracting it would form a cycle through nodes
    outside it (it is then cut into acyclic pieces; ``sdk.explain`` shows the graph's note
    ``would form a cycle through <node>``); a group or piece below ``min_size`` call nodes
    goes to the next plugin of the chain, else ATen, with the reason in its placement.

    :param ctx: the compile.
    :param gm: the whole ATen graph; do not modify it.
    :return: ``{node: Support.yes() | Support.no(reason)}``, or ``sdk.ClaimGroups(groups,
        min_size, refused)``; call_function nodes left out are refused with the reason "not
        claimed". Stops at first non-None result.
    :raises: an exception (also a group holding something else than a call node of ``gm``)
        is recorded and counts as refusing every node.

    API version: 3 (``ClaimGroups``: 7).
    """


@hookspec(firstresult=True)
def sdk_compile_subgraph(
    ctx: CompileContext, gm: GraphModule, example_inputs: Sequence[Any]
) -> CompiledSubgraph | None:
    """Compile one partition this plugin claimed.

    Called outside the compile's fake mode: tensors the hook makes are real (see "Fake
    tensors and real ones" in :mod:`sdk.hookspecs`). ``ctx.threads`` is the intra-op thread
    count the compiled function should use (``torch.get_num_threads()`` when the compile
    began).

    The output contract: ``fn`` returns one value per output of ``gm``'s output node, each
    with the sizes, dtype, device *and strides* of its ``meta["val"]`` (dimensions of size 1
    aside; an expanded output, stride 0, may be dense), none sharing an input's storage
    unless ATen's run of ``gm`` does; it writes no input. Ask for ``preallocated_outputs`` to have the core allocate the outputs in that
    layout, and declare ``aliases`` to write an output into an input the core proves dead
    (:class:`sdk.CompiledSubgraph`). The conformance kit checks all of it.

    With ``PluginInfo.frozen_parameters`` (hook API 7), an inference partition's parameters
    and buffers (BatchNorm's running statistics; not those the graph itself writes) are
    ``get_attr`` constants of ``gm`` (``dict(gm.named_buffers())``, real tensors), not
    placeholders, and this hook runs outside the compile's fake mode; it is called again
    when one of them is replaced or written in place.

    With ``PluginInfo.isolate_compile`` (or the user's option ``isolate_compile=True``) the
    hook runs in a worker process of its own (concrete sizes only): a crash there (a signal,
    an exit) refuses the partition with the signal as its reason, and what it returns must
    carry an ``artifact``, which ``sdk_load_subgraph`` turns into the callable in the user's
    process (``fn`` is not used).

    :param ctx: the compile.
    :param gm: a self-contained GraphModule of ATen ops: its placeholders are the
        partition's inputs in order, its output is a tuple.
    :param example_inputs: fake tensors or ints, one per placeholder: concrete sizes,
        unless the plugin declares ``Capability.SYMBOLIC_SIZES`` (then symbolic sizes and
        ``SymInt``s where the compile is dynamic; without it the core compiles the
        partition once per concrete shape it meets, at its first call with that shape).
    :return: a :class:`sdk.CompiledSubgraph`. Stops at first non-None result.
    :raises: any exception refuses the partition: the core records it (the partition's
        ``note`` in the report) and compiles that partition with the next kernel-level
        plugin of the chain (which takes any graph: what it cannot lower runs as ATen calls
        in its program), else runs it in ATen; only that partition, with one
        :class:`sdk.PluginFallbackWarning` per plugin and reason. With symbolic inputs the
        core first compiles that partition per shape. Strict mode raises instead:
        ``fallback=False`` :class:`sdk.LoweringError`, ``debug=True`` with the plugin's
        error as its cause.

    API version: 3.
    """


@hookspec(firstresult=True)
def sdk_load_subgraph(ctx: CompileContext, artifact: bytes) -> Callable[..., Any] | None:
    """Rebuild a partition's callable from the bytes a :class:`sdk.CompiledSubgraph` stored.

    Called in a later process on a whole-graph cache hit, instead of the vendor compiler;
    outside the compile's fake mode, as ``sdk_compile_subgraph`` is.

    :param ctx: the compile.
    :param artifact: ``CompiledSubgraph.artifact`` as stored.
    :return: the callable (same contract as ``CompiledSubgraph.fn``), or None if the bytes
        are not usable. Stops at first non-None result.
    :raises: raising also means "not usable": the core then compiles afresh (a miss).

    API version: 3.
    """
