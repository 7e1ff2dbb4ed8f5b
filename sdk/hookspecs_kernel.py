"""The hooks of a kernel-level plugin's compile (``PluginKind.CODEGEN``), called on the
*codegen plugin of the compile* only, in the order the core calls them: graph preparation
(decompositions, kept ops), lowering (op support, the plugin's own lowerings, library calls,
graph passes), scheduling (fusion vetoes, kernel limits) and codegen (render, compile,
measured kernel choices, the cache key).

Part of the hook specification, :mod:`sdk.hookspecs`, which imports these hooks: pluggy reads
them there, and its doc says what an exception from a hook means and which hooks run in the
compile's fake mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sdk._hookspec import hookspec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch.fx import Node

    from sdk.context import CompileContext, GraphPass, KernelLimits
    from sdk.ir import FusionGroup, Kernel, LoweringBuilder, OpOverload, TensorValue
    from sdk.kernels import KernelChoices, KernelFn, KernelSource
    from sdk.subgraph import Support


# ---------------------------------------------------------------------------
# Graph preparation: the compile's codegen plugin only
# ---------------------------------------------------------------------------


@hookspec
def sdk_decompositions(
    ctx: CompileContext,
) -> Mapping[OpOverload, Callable[..., Any]] | None:
    """Add decompositions to the core's default table.

    Called once per Dynamo graph, when AOTAutograd traces it (not on a hit of torch's
    AOTAutograd cache: the table must depend only on what ``PluginInfo.version`` and
    ``sdk_cache_key`` say). The table used is: core defaults, updated with every result
    (a plugin entry replaces the core's for that op), minus the ops of ``sdk_keep_ops``.

    :param ctx: the compile (``ctx.graph_kind`` is ``"inference"`` here: the forward and
        backward graphs are traced with the same table).
    :return: ``{OpOverload: fn}`` or None; ``fn`` takes the op's arguments and computes it
        with other ATen ops (``torch.ops.aten...``). 1:N, every answer is merged.
    :raises: an exception: the core's default table traces the graph, and every graph of
        this compile goes to the chain or ATen (see :mod:`sdk.hookspecs`).

    API version: 1.
    """


@hookspec
def sdk_keep_ops(ctx: CompileContext) -> Iterable[OpOverload] | None:
    """Name ATen ops that must reach lowering whole (not decomposed).

    Use it for ops the plugin lowers better itself, or runs through a library
    (``sdk_lower_op`` or an extern). Called right after ``sdk_decompositions``.
    A kept op the core has no lowering for, and which ``sdk_lower_op`` does not lower,
    runs in ATen (a fallback with the reason).

    Keeping an op also keeps the ops autograd calls to differentiate it, which AOTAutograd
    puts in the backward graph: keeping ``aten.gelu`` keeps ``aten.gelu_backward``,
    keeping ``aten._softmax`` keeps ``aten._softmax_backward_data`` (the core finds them
    by running the op's derivative once on meta tensors). Lower those too (in
    ``sdk_lower_op``; ``sdk_op_support`` sees them), or they run through the op-level ATen
    fallback with the reason in the graph's report; to have one decomposed after all,
    return it from ``sdk_decompositions``, which wins over this.

    With a chain (``options["chain"]``), this plugin's kept ops and decompositions apply
    to the graphs this plugin compiles only: every other plugin of the chain gets the
    graph decomposed by its own table.

    :param ctx: the compile, as for ``sdk_decompositions``.
    :return: an iterable of OpOverloads (an OpOverloadPacket such as ``aten.gelu`` stands
        for all its overloads), or None. 1:N, the union is kept.
    :raises: as ``sdk_decompositions``.

    API version: 1.
    """


# ---------------------------------------------------------------------------
# Lowering: the compile's codegen plugin only
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_op_support(ctx: CompileContext, op: OpOverload, node: Node) -> Support | None:
    """Say whether ``node`` (a call of ``op``) may go into a generated kernel.

    Called for every ATen call in the graph, before lowering (the graph the graph passes
    left: ``sdk_graph_passes``). ``node.meta["val"]``
    holds the fake tensor(s) the op produces (shape, dtype, device). Refusing
    sends the op to the op-level ATen fallback; ``explain`` shows the reason.
    In a chain's partitioning it is also how a kernel-level plugin claims ops.

    :param ctx: the compile.
    :param op: the ATen op, ``node.target`` (``torch.ops.aten.mul.Tensor``).
    :param node: the FX call node: ``node.args`` and ``node.kwargs`` (keyword-only
        arguments, where not the default) hold its inputs, input nodes' ``meta["val"]``
        their fake tensors; symbolic sizes are ``torch.SymInt`` s.
    :return: :meth:`Support.no` with a reason to refuse, :meth:`Support.yes` or
        None to accept. Stops at first non-None result.
    :raises: an exception fails the whole graph (the chain, else ATen), not just the op:
        refuse instead. (In a chain's partitioning it makes the plugin claim nothing.)

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

    Called for every accepted ATen call of the graph the graph passes left
    (``sdk_graph_passes``: with ``Preferences.conv_bias_in_kernel`` a convolution's bias
    arrives as ``None``, an ``aten.add`` after it adds it), before the core's own lowering
    table.
    Tensor arguments arrive as :class:`sdk.ir.TensorValue` (read one with
    ``value.load(index)``); build the result with ``builder``
    (:class:`sdk.ir.LoweringBuilder`: ``pointwise``, ``reduction``, ``extern``;
    ``builder.out`` is the fake tensor the op produces). The vendor guide's "Lowering an
    op yourself" is a worked example (``aten.gelu``, bf16, symbolic sizes).

    :param ctx: the compile.
    :param op: the ATen op (an op the core decomposes reaches here only if
        ``sdk_keep_ops`` keeps it).
    :param args: the positional arguments of the call, as the op's schema has them
        (``op._schema``): tensors as :class:`sdk.ir.TensorValue`, the rest as Python values
        (sizes may be sympy expressions under symbolic sizes).
    :param kwargs: the keyword-only arguments the graph passes (``approximate="tanh"`` of
        ``aten.gelu``); one left at its default is absent.
    :param builder: builds the IR; ``builder.out.shape`` holds ``torch.SymInt`` s under
        symbolic sizes: pass them on, never ``int()`` them.
    :return: a TensorValue (or tuple of them for multi-output ops), or None to
        let the core lower it (a kept op it has no lowering for then runs in ATen).
        Stops at first non-None result.
    :raises: an exception fails the whole graph (in a symbolic compile, per shape first;
        then the chain, else ATen): return None, or refuse the op in ``sdk_op_support``,
        instead.

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
    schema has them. With ``Preferences.conv_bias_in_kernel`` a convolution's bias is
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


@hookspec(firstresult=True)
def sdk_graph_passes(
    ctx: CompileContext, passes: Sequence[GraphPass]
) -> Sequence[GraphPass] | None:
    """Choose the rewrites of the ATen graph that run before it is lowered: turn the core's
    off, add your own.

    ``passes`` is the core's list for this compile, in the order it runs them: each a
    :class:`sdk.GraphPass` with a ``name`` and a one-line ``description``
    (``relu_into_addmm``; ``mm_bias_into_kernel`` and ``conv_bias_into_kernel`` where the
    plugin prefers them (``sdk.Preferences.mm_bias_in_kernel`` and ``conv_bias_in_kernel``)).
    Return the list to run instead: leave a core pass out to turn it off, put your own
    :class:`sdk.GraphPass` where it should run (each pass sees the graph the ones before it
    left). ``sdk.explain`` lists each graph's passes with what each changed (``passes:
    relu_into_addmm: 2 rewrites, double_to_add (sdk:acme): 1 rewrite``), and the core's you
    turned off as ``off``::

        @sdk.hookimpl
        def sdk_graph_passes(ctx, passes):
            mine = sdk.GraphPass("double_to_add", "x * 2 as x + x", double_to_add)
            return [p for p in passes if p.name != "relu_into_addmm"] + [mine]

    Called once per compiled graph variant (forward, backward, inference; each partition of
    a chain this plugin compiles), after ``sdk_extern`` and before the whole-graph cache is
    looked up: the cache keys a program on the names of the passes that run, so
    ``sdk_cache_key`` must change where what your passes do changes (your sources:
    ``sdk.cache.source_digest(__name__)``). The passes themselves run only when the graph is
    compiled (not on a cache hit; a warm start asks this hook too, and a program compiled
    with other passes is not served). :class:`sdk.GraphPass` says what a pass may do, and what
    the core does with one that raises (the graph compiles without it: a fault of this
    plugin in the graph's report).

    :param ctx: the compile.
    :param passes: the core's passes for this compile, in order (a tuple).
    :return: the passes to run, in order (a list or tuple of :class:`sdk.GraphPass`, names
        unique), or None to run ``passes`` as they are. Stops at first non-None result.
        Anything else fails the whole graph (the chain, else ATen), as an exception does.
    :raises: an exception fails the whole graph for this plugin (the chain, else ATen; with
        ``fallback=False`` it propagates), as any compile hook's.

    Appeared in hook-API version 5.
    """


# ---------------------------------------------------------------------------
# Scheduling: the compile's codegen plugin only
# ---------------------------------------------------------------------------


@hookspec
def sdk_can_fuse(
    ctx: CompileContext, first: FusionGroup, second: FusionGroup, merged: FusionGroup
) -> Support | None:
    """Veto a fusion the core's scheduler proposes.

    Called for each candidate pair the core found legal (compatible loop nests,
    no cycle, dependencies satisfiable in one kernel, within ``sdk_kernel_limits``),
    in order of memory traffic saved. ``first`` runs before ``second`` in the graph.
    ``merged`` is the kernel the fusion would make: its ``inputs`` leave out what
    ``first`` produces only for ``second``, so ``len(merged.inputs) > 4`` says "more
    than four input buffers" (``merged`` appeared in hook-API version 4). A fixed
    per-kernel limit is better declared with ``sdk_kernel_limits``, which also covers
    kernels no fusion makes.

    :param ctx: the compile.
    :param first: the group (one or more fused nodes) that runs first.
    :param second: the group that would join it, reading what ``first`` computes or
        sharing its loop nest.
    :param merged: the kernel the fusion would make (``inputs``, ``outputs``, ``buffers``
        counted for the fused kernel; hook-API version 4).
    :return: :meth:`Support.no` with a reason to refuse, or None / ``Support.yes``
        (``sdk.Verdict``, removed in hook API 6, was its alias).
        1:N, any refusal wins: every plugin with a say may veto a fusion. Vetoes are
        listed in :attr:`sdk.GraphReport.fusion_refusals`.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_kernel_limits(ctx: CompileContext) -> KernelLimits | None:
    """Declare what one kernel may take at most (pointer arguments, inputs, outputs).

    Called before scheduling each compiled graph variant (again if an op had to go to
    ATen and the graph is scheduled anew): keep it cheap. The scheduler keeps every
    kernel within the limits by not fusing past them (the refused fusions are in
    :attr:`sdk.GraphReport.fusion_refusals`); an ATen op that exceeds a limit on its own
    runs through the op-level ATen fallback with the reason in the report. Use it rather
    than raising in ``sdk_render_kernel``, which sends the whole graph to the chain or ATen.

    :param ctx: the compile (``ctx.device_type``, ``ctx.plugin_options``: a limit may
        depend on the device model).
    :return: a :class:`sdk.KernelLimits`, or None for no limit. Stops at first non-None
        result.

    Appeared in hook-API version 4.
    """


# ---------------------------------------------------------------------------
# Codegen: the compile's codegen plugin only
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_render_kernel(ctx: CompileContext, kernel: Kernel) -> KernelSource | None:
    """Render one scheduled IR kernel to source.

    Called once per kernel after scheduling and memory planning. Must not
    compile: ``explain`` and the cache read the source before any compile.

    :param ctx: the compile.
    :param kernel: the fused loop nest (:class:`sdk.ir.Kernel`): its ``args`` are the
        compiled kernel's buffer arguments in order, its ``size_args`` the integer size
        arguments after them (symbolic sizes only; empty otherwise).
    :return: a :class:`sdk.KernelSource`. Stops at first non-None result; None from
        every plugin fails the graph.
    :raises: ``TypeError`` for a symbolic size the renderer cannot handle: in a symbolic
        compile any exception makes the core compile the graph per shape instead. Otherwise
        (and if a per-shape compile raises too) the whole graph goes to the chain, else ATen.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_compile_kernels(ctx: CompileContext, sources: list[KernelSource]) -> list[KernelFn] | None:
    """Compile all rendered kernels of one graph into callables.

    Called once per graph with every kernel's source, so a plugin can build
    them in one compiler run. Each callable (:data:`sdk.KernelFn`) is called as
    ``fn(*buffers, *sizes)``: the kernel's tensors in ``Kernel.args`` order, then one
    Python ``int`` per symbol of ``Kernel.size_args`` in that order (the run's values of
    the symbolic sizes, each >= 2; none for a kernel of static sizes). It writes its
    ``out``/``inout`` buffers and returns nothing. A kernel that finds an input out of
    range (an indirect index past its extent) raises ``IndexError`` naming the kernel,
    as eager raises for the same input: the core re-runs the graph's call in ATen, which
    raises too, and the kernel's ``IndexError`` reaches the caller (see "run time" in
    :mod:`sdk.hookspecs`). ``sdk.clike.launchers`` makes such callables for C-like kernels.

    :param ctx: the compile.
    :param sources: every kernel ``sdk_render_kernel`` rendered for this graph, in
        program order.
    :return: one callable per source, in the order of ``sources``. Stops at first
        non-None result; None, or a list of another length, fails the graph.
    :raises: an exception (a compiler error) fails the whole graph (the chain, else ATen).

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_kernel_choices(
    ctx: CompileContext, kernel: Kernel, source: KernelSource
) -> KernelChoices | None:
    """Offer other ways to run one kernel (launch configurations, variants), for the core to
    measure against the rendered one and keep the fastest.

    Called after ``sdk_compile_kernels``, for the graph's kernels whose device time matters
    most (the core ranks them by the memory they move, largest first, and leaves out those
    under a MiB and those of symbolic sizes), while the compile's ``tune_budget_s`` lasts:
    not at all with a budget of 0. Return None for a kernel, or on a device, where measuring
    does not pay (a CPU, an interpreter): the plugin decides whether measuring happens by
    default. The core compiles the alternatives through ``sdk_compile_kernels`` (one call per
    kernel, the alternatives only: they may share the rendered kernel's name and entry), runs
    the rendered kernel and each alternative on buffers it allocates from the kernel's
    argument layouts (floats random, integers and booleans zero: indirect indices stay in
    range), times them with its wall clock and :attr:`sdk.KernelChoices.synchronize`, and
    keeps the fastest. An alternative must compute what the rendered kernel does: the core
    compares their results on the same inputs first (up to a reduction's rounding), and leaves
    out one whose results differ, or whose compile or call raises (the reason in the report). The kept source replaces the rendered one in the program and in the
    whole-graph cache: a cache hit, a warm start, compiles it and measures nothing; the
    kernel-choice cache (``DiskCache("kernel-choices")``, keyed on ``sdk_cache_key``, the
    sources and labels) serves the same kernel in another graph. ``sdk.explain`` lists each
    measured kernel with its candidates' times (:class:`sdk.KernelChoiceReport`). Hook API 6
    (the hook is optional: a plugin without it keeps its rendered kernels)::

        @sdk.hookimpl
        def sdk_kernel_choices(ctx, kernel, source):
            if not on_gpu():
                return None
            return sdk.KernelChoices(
                [sdk.KernelVariant(f"BLOCK={b}", with_block(source, b)) for b in (256, 1024)],
                synchronize=torch.cuda.synchronize,
                default=f"BLOCK={source.meta['block']}",
            )

    :param ctx: the compile (``ctx.core_options.autotune``: the user asked for more
        candidates, ``mode="max-autotune"``).
    :param kernel: the scheduled kernel (:class:`sdk.ir.Kernel`; its ``args`` the layouts of
        the buffers the core times it on).
    :param source: what ``sdk_render_kernel`` returned for it.
    :return: an :class:`sdk.KernelChoices`, or None to keep ``source`` unmeasured. Stops at
        first non-None result.
    :raises: an exception is a fault of this plugin's (``hook_faults`` in the report; strict
        mode raises :class:`sdk.PluginHookError`): the kernel keeps its rendered source.

    Appeared in hook-API version 6.
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

    :param ctx: the compile.
    :return: the key part, or None (also when not implemented) to keep this plugin's
        programs out of the cache. Stops at first non-None result.
    :raises: an exception fails the whole graph, like any compile hook's; return None to
        stay out of the cache.

    API version: 2.
    """
