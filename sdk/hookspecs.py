"""The hook specification: the whole contract between the SDK core and a plugin.

A plugin is a module (or object) with functions named after these hooks and
decorated with :data:`sdk.hookimpl`. It is found through the ``sdk.plugins``
entry-point group (see the README, "Writing a plugin"). pluggy checks every
hookimpl against this file when the plugin is registered: a misspelt hook name
or an argument the spec lacks makes the plugin *unavailable*, with the reason,
and leaves every other plugin working.

Which plugins a hook reaches:

* identity hooks (``sdk_plugin_info``, ``sdk_plugin_status``) are called on one
  plugin at a time;
* compile hooks (decompositions to codegen) are called on the *codegen plugin of
  the compile* only, so one vendor can never change another vendor's compile;
* ``sdk_wrap_compiled`` reaches the wrapper plugins the compile asked for
  (``mode="reduce-overhead"`` or ``options={"wrappers": [...]}``);
* observer hooks (``sdk_on_*``) reach every available plugin, each plugin on its own: one
  that raises is recorded in the graph's report (``hook_faults``) and warned about, and
  neither the compile nor another plugin's observer notices (strict mode, ``fallback=False``
  or ``debug=True``, raises :class:`sdk.PluginHookError` instead).

Every hook receives only what it names; a hookimpl may take a subset of the
arguments. Every hook appeared in hook-API version 1 but ``sdk_cache_key`` (version 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch.fx import GraphModule, Node

    from sdk.ir import FusionGroup, Kernel, LoweringBuilder, OpOverload, TensorValue
    from sdk.plugin import (
        CompileContext,
        CompiledSubgraph,
        KernelFn,
        KernelSource,
        PluginInfo,
        Support,
        Verdict,
    )

PROJECT = "sdk"
hookspec = pluggy.HookspecMarker(PROJECT)


# ---------------------------------------------------------------------------
# Identity: called on one plugin at a time
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_plugin_info() -> PluginInfo:
    """Describe the plugin: name, version, hook-API version, devices, kind, capabilities.

    Called once, right after the plugin module is imported and registered, and
    before any other hook. A plugin whose ``hook_api`` the core does not support
    is unregistered and listed as unavailable.

    :return: a :class:`sdk.PluginInfo`. Stops at first non-None result (each
        plugin answers for itself only).

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_plugin_status() -> str | None:
    """Say whether the plugin can run on this machine now.

    Called lazily: by ``python -m sdk list`` and before the plugin's first
    compile. Keep it cheap and free of side effects (no device initialisation
    beyond a query such as ``torch.cuda.is_available()``).

    :return: ``None`` when usable, else the reason it is not *and the fix*, e.g.
        ``"no CUDA device visible (torch.cuda.is_available() is False); run on a
        GPU machine or set TRITON_INTERPRET=1 to run kernels on CPU tensors"``.
        Stops at first non-None result.

    API version: 1.
    """


# ---------------------------------------------------------------------------
# Graph preparation: the compile's codegen plugin only
# ---------------------------------------------------------------------------


@hookspec
def sdk_decompositions(
    ctx: CompileContext,
) -> Mapping[OpOverload, Callable[..., Any]] | None:
    """Add decompositions to the core's default table.

    Called once per compile before AOTAutograd traces the graph. The table used
    is: core defaults, updated with every result (a plugin entry replaces the
    core's for that op), minus the ops of ``sdk_keep_ops``.

    :return: ``{OpOverload: fn}`` or None. 1:N, every answer is merged.

    API version: 1.
    """


@hookspec
def sdk_keep_ops(ctx: CompileContext) -> Iterable[OpOverload] | None:
    """Name ATen ops that must reach lowering whole (not decomposed).

    Use it for ops the plugin lowers better itself, or runs through a library
    (``sdk_lower_op`` or an extern). Called right after ``sdk_decompositions``.

    :return: an iterable of OpOverloads, or None. 1:N, the union is kept.

    API version: 1.
    """


# ---------------------------------------------------------------------------
# Lowering: the compile's codegen plugin only
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_op_support(ctx: CompileContext, op: OpOverload, node: Node) -> Support | None:
    """Say whether ``node`` (a call of ``op``) may go into a generated kernel.

    Called for every ATen call in the graph, before lowering. ``node.meta["val"]``
    holds the fake tensor(s) the op produces (shape, dtype, device). Refusing
    sends the op to the op-level ATen fallback; ``explain`` shows the reason.

    :return: :meth:`Support.no` with a reason to refuse, :meth:`Support.yes` or
        None to accept. Stops at first non-None result.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_lower_op(
    ctx: CompileContext,
    op: OpOverload,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    builder: LoweringBuilder,
) -> TensorValue | None:
    """Lower one ATen call to loop IR in place of the core's lowering.

    Called for every accepted ATen call, before the core's own lowering table.
    Tensor arguments arrive as :class:`sdk.ir.TensorValue` (read one with
    ``value.load(index)``); build the result with ``builder``
    (:class:`sdk.ir.LoweringBuilder`: ``pointwise``, ``reduction``, ``extern``;
    ``builder.out`` is the fake tensor the op produces).

    :return: a TensorValue (or tuple of them for multi-output ops), or None to
        let the core lower it. Stops at first non-None result.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_extern(ctx: CompileContext, op: OpOverload, node: Node) -> Callable[..., Any] | None:
    """Supply the plugin's own library function for one library call of the graph.

    Matrix products, convolutions and attention are library calls: the core runs them
    through ATen (cuBLAS, oneDNN...) between its generated kernels. This hook lets the
    compile's codegen plugin run one through its own library instead (its BLAS, its DNN
    library). Called once per compiled graph variant, forward and backward graphs alike,
    for each call node whose op is one of ``sdk.ir.LIBRARY_OPS`` (``aten.mm``, ``bmm``,
    ``addmm``, ``baddbmm``, ``convolution``, ``convolution_backward`` and the
    ``_scaled_dot_product_*`` attention ops and their backwards), before the whole-graph
    cache is looked up. ``python -m sdk ops`` lists them.

    The callable is called where ATen's op would be, with the same arguments: tensors in
    (in the strides the core gives them, which may not be contiguous: a transposed weight
    of a ``linear`` reaches ``mm`` as a strided view), ints, floats and lists as the op's
    schema has them. With ``Capability.CONV_BIAS_IN_KERNEL`` a convolution's bias is
    ``None`` (the core adds it in the kernel that follows). It returns a new tensor
    (a tuple of them where the op returns several) of the shape, dtype and device ATen's
    op gives, and must not write to its inputs. Any strides will do: the core copies a
    result into the strides the rest of the graph reads it in. A result of another
    shape, dtype or device raises :class:`sdk.SDKError` naming the plugin, op and node;
    the graph then runs through ATen (the reason in its report), or, with
    ``fallback=False``, the error propagates.

    Under dynamic shapes ``node.meta["val"]`` holds symbolic sizes; the callable gets
    each call's real tensors. ``sdk.explain`` lists the call as
    ``extern aten.mm.default (mm) by sdk:<plugin>``.

    The whole-graph cache keys a program on which nodes got a callable (by the callable's
    qualified name), and on a cache hit this hook is asked again: the program calls what
    it answers now. ``sdk_cache_key`` must change where the answers change for another
    reason than the graph (a library found or not).

    :param ctx: the compile.
    :param op: the ATen op, ``node.target``.
    :param node: the call node; ``node.meta["val"]`` is the fake tensor(s) it produces
        (shape, dtype, strides), ``node.args`` hold the input nodes (their ``meta["val"]``
        too).
    :return: a callable, or None to let ATen run the op (as without this hook). Stops at
        first non-None result.
    :raises: an exception makes the whole graph fail for this plugin (the chain, else
        ATen, takes it; ``fallback=False`` raises).

    Appeared in hook-API version 4.
    """


# ---------------------------------------------------------------------------
# Scheduling: the compile's codegen plugin only
# ---------------------------------------------------------------------------


@hookspec
def sdk_can_fuse(ctx: CompileContext, first: FusionGroup, second: FusionGroup) -> Verdict | None:
    """Veto a fusion the core's scheduler proposes.

    Called for each candidate pair the core found legal (compatible loop nests,
    no cycle, dependencies satisfiable in one kernel), in order of memory
    traffic saved. ``first`` runs before ``second`` in the graph.

    :return: :meth:`Verdict.no` with a reason to refuse, or None / ``Verdict.yes``.
        1:N, any refusal wins: every plugin with a say may veto a fusion.

    API version: 1.
    """


# ---------------------------------------------------------------------------
# Codegen: the compile's codegen plugin only
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_render_kernel(ctx: CompileContext, kernel: Kernel) -> KernelSource | None:
    """Render one scheduled IR kernel to source.

    Called once per kernel after scheduling and memory planning. Must not
    compile: ``explain`` and the cache read the source before any compile.

    :return: a :class:`sdk.KernelSource`. Stops at first non-None result.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_compile_kernels(ctx: CompileContext, sources: list[KernelSource]) -> list[KernelFn] | None:
    """Compile all rendered kernels of one graph into callables.

    Called once per graph with every kernel's source, so a plugin can build
    them in one compiler run. Each callable takes the kernel's buffers
    (tensors, in ``Kernel.args`` order) and returns nothing.

    :return: callables in the order of ``sources``. Stops at first non-None result.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_cache_key(ctx: CompileContext) -> str | None:
    """What else this plugin's kernels depend on, for the whole-graph cache.

    The core keys a compiled program on the graph, its input layouts, the options, the
    plugin's name and version, the SDK's version and sources and torch's version. Return
    a string of everything else that changes what ``sdk_render_kernel`` and
    ``sdk_compile_kernels`` make: the compiler and its version and flags, the device model,
    the plugin's own sources (``sdk.cache.source_digest(__name__)``). Called once per
    compiled graph: keep it cheap (memoize what does not change).

    :return: the key part, or None (also when not implemented) to keep this plugin's
        programs out of the cache. Stops at first non-None result.

    API version: 2.
    """


# ---------------------------------------------------------------------------
# Graph-level plugins (PluginKind.GRAPH): the plugin compiles whole partitions
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_claim_nodes(ctx: CompileContext, gm: GraphModule) -> Mapping[Node, Support] | None:
    """Which ATen call nodes of ``gm`` this graph-level plugin compiles.

    Called once per ATen graph (forward, backward or inference), after decompositions.
    ``node.meta["val"]`` holds fake tensors (symbolic sizes under dynamic shapes). The
    core partitions the graph from these claims: each node goes to the first plugin of
    the chain that claims it.

    :param ctx: the compile.
    :param gm: the whole ATen graph; do not modify it.
    :return: ``{node: Support.yes() | Support.no(reason)}``; call_function nodes left out
        are refused with the reason "not claimed". Stops at first non-None result.
    :raises: an exception is recorded and counts as refusing every node.

    API version: 3.
    """


@hookspec(firstresult=True)
def sdk_compile_subgraph(
    ctx: CompileContext, gm: GraphModule, example_inputs: Sequence[Any]
) -> CompiledSubgraph | None:
    """Compile one partition this plugin claimed.

    :param ctx: the compile.
    :param gm: a self-contained GraphModule of ATen ops: its placeholders are the
        partition's inputs in order, its output is a tuple.
    :param example_inputs: fake tensors (symbolic sizes where dynamic) or ints/SymInts,
        one per placeholder.
    :return: a :class:`sdk.CompiledSubgraph`. Stops at first non-None result.
    :raises: any exception refuses the partition: the core records it (the partition's
        ``note`` in the report) and compiles that partition with the next kernel-level
        plugin of the chain (which takes any graph: what it cannot lower runs as ATen calls
        in its program), else runs it in ATen; only that partition. Strict mode
        (``fallback=False`` or debug) raises instead.

    API version: 3.
    """


@hookspec(firstresult=True)
def sdk_load_subgraph(ctx: CompileContext, artifact: bytes) -> Callable[..., Any] | None:
    """Rebuild a partition's callable from the bytes a :class:`sdk.CompiledSubgraph` stored.

    Called in a later process on a whole-graph cache hit, instead of the vendor compiler.

    :param ctx: the compile.
    :param artifact: ``CompiledSubgraph.artifact`` as stored.
    :return: the callable (same contract as ``CompiledSubgraph.fn``), or None if the bytes
        are not usable. Stops at first non-None result.
    :raises: raising also means "not usable": the core then compiles afresh (a miss).

    API version: 3.
    """


# ---------------------------------------------------------------------------
# Wrapping: the wrapper plugins the compile asked for
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_wrap_compiled(ctx: CompileContext, compiled: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a compiled graph (for example to capture and replay it as a CUDA graph).

    Called once per compiled graph. The core answers innermost with
    ``compiled`` unchanged; implement it as ``@sdk.hookimpl(wrapper=True)``:
    ``inner = yield`` gives the (possibly already wrapped) callable, and what
    you return replaces it. The callable takes the graph's inputs (tensors
    and ints) as positional arguments and returns a tuple of outputs.
    Several wrappers apply in the order of ``options["wrappers"]``, the first innermost; one
    whose hook raises is left out (the fault is in the graph's report).

    :return: the callable to run. Stops at first non-None result.

    API version: 1.
    """


# ---------------------------------------------------------------------------
# Observers: every available plugin
# ---------------------------------------------------------------------------


@hookspec
def sdk_on_graph_compiled(ctx: CompileContext, report: Any) -> None:
    """A graph finished compiling; ``report`` is its :class:`sdk.explain.GraphReport`.

    1:N, results ignored. API version: 1.
    """


@hookspec
def sdk_on_kernel_compiled(ctx: CompileContext, source: KernelSource) -> None:
    """A kernel was rendered and compiled. 1:N, results ignored. API version: 1."""


@hookspec
def sdk_on_fallback(ctx: CompileContext, op: str, reason: str) -> None:
    """An ATen op runs through the op-level fallback instead of a generated kernel.

    1:N, results ignored. API version: 1.
    """


__all__ = [name for name in dir() if name.startswith("sdk_")] + ["hookspec", "PROJECT"]
