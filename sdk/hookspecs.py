"""The hook specification: the whole contract between the SDK core and a plugin.

A plugin is a module (or object) with functions named after these hooks and
decorated with :data:`sdk.hookimpl`. It is found through the ``sdk.plugins``
entry-point group (docs/vendor-guide.md, "The plugin contract"). pluggy checks every
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
arguments. Every hook appeared in hook-API version 1 but ``sdk_cache_key`` (version 2),
the graph-level hooks (version 3), ``sdk_kernel_limits`` and ``sdk_extern`` (version 4),
``sdk_graph_passes`` (version 5), ``sdk_preferences`` and ``sdk_kernel_choices`` (version 6);
version 7 added answers and fields, not hooks: ``sdk_claim_nodes`` may answer
:class:`sdk.ClaimGroups`, ``PluginInfo.frozen_parameters``, ``CompiledSubgraph``'s
``preallocated_outputs`` and ``aliases``.
Each docstring ends with the version its hook appeared in; the vendor guide's
"Versioning" has the table of hook-API versions and the SDK releases that provide them.

What an exception from a hook means
-----------------------------------

A hook says "no" by returning a value (``Support.no(reason)``, ``None``), never by
raising. An exception means the hook failed, and where it was raised decides what the
core does with it:

* **identity hooks**: the plugin is unavailable, with the hook and the error as the
  reason (``python -m sdk list``); every other plugin works on.
* **compile hooks of a kernel-level plugin** (``sdk_decompositions`` through
  ``sdk_compile_kernels``, ``sdk_cache_key`` included; ``debug`` off): *the whole
  graph* goes to the next plugin of ``options["chain"]``, else runs in ATen op by op,
  the plugin, hook and error being each fallback's reason in ``sdk.explain``. There is
  no per-op fallback from an exception: to send one op to ATen, refuse it in
  ``sdk_op_support``.
* **the same during a symbolic compile** (the plugin declares
  ``Capability.SYMBOLIC_SIZES`` and the graph has symbolic sizes): the core first
  compiles the graph *per concrete shape* instead (``GraphReport.sizes`` says why), and
  applies the rule above only if a per-shape compile raises too. Raise ``TypeError`` for
  a symbolic size you cannot handle (any exception does the same; TypeError says what
  it is).
* **graph-level hooks** (hook API 3): ``sdk_claim_nodes`` raising refuses every node
  (a fault in the report); ``sdk_compile_subgraph`` raising refuses *that partition*
  only (per shape first, where its inputs are symbolic), which the next kernel-level
  plugin of the chain compiles, else ATen; ``sdk_load_subgraph`` raising is a cache miss.
* **run time**: a compiled kernel (:data:`sdk.KernelFn`) or a partition's function
  that raises when called makes the core run that call's graph again in ATen. If ATen
  raises too, the inputs were at fault (an index out of range): *your* exception
  reaches the caller and the program stays. Otherwise the program was wrong where eager
  is not, and ATen runs this graph from then on, with the reason in its report. A
  program that had begun writing its inputs in place (``CompileContext.written_inputs``)
  is not run again: your exception reaches the caller, with a note, and ATen runs the
  graph from the next call on. ``torch.OutOfMemoryError`` always propagates.
* **observers and wrappers**: a fault of their own plugin only, listed in the graph's
  report (``hook_faults``) and warned about once (:class:`sdk.PluginHookWarning`); a
  wrapper that raises leaves the graph unwrapped.
* **``sdk_kernel_choices``** (hook API 6; measuring is optional): a fault of its plugin only,
  as an observer's; that kernel keeps the source ``sdk_render_kernel`` gave it.
* **a graph pass** (a :class:`sdk.GraphPass` of the plugin's, from ``sdk_graph_passes``)
  that raises when it runs: the same, for that pass: the graph compiles without it.
* :class:`sdk.SDKError` (or a subclass), raised on purpose by any compile hook: not a
  failure to recover from but an error for the user (an option value the plugin cannot
  honour); it reaches the caller as it is (inside torch's ``BackendCompilerFailed``)
  and nothing falls back.

Strict mode changes the recoveries into errors: ``options={"fallback": False}`` raises
:class:`sdk.SDKError` naming the plugin, hook and error where a graph would have fallen
back (:class:`sdk.LoweringError`, a subclass, where an op or a partition would have run in
ATen); ``debug=True`` (or ``SDK_DEBUG=1``) lets the plugin's own exception
propagate (as the ``__cause__`` of one naming the plugin and the hook); both raise
:class:`sdk.PluginHookError` for an observer or wrapper that raised, and let a kernel's
run-time exception propagate. Without strict mode, a partition or a kernel-level plugin's
graph that falls back (to the next plugin of the chain, or ATen) gives one
:class:`sdk.PluginFallbackWarning` per plugin and reason, naming its ops.

Fake tensors and real ones
--------------------------

The core calls the compile hooks while AOTAutograd traces, inside its ``FakeTensorMode``:
a tensor a hook makes with a torch factory (``torch.ones(1)``) would be a fake one (sizes,
no data). The hooks that build what runs, ``sdk_extern``, ``sdk_compile_kernels``,
``sdk_compile_subgraph`` and ``sdk_load_subgraph``, are called *outside* that mode: a
tensor they make is real (a constant, an example to trace or export with). What they are
given stays as it was: ``example_inputs`` and ``node.meta["val"]`` are fake tensors (sizes,
strides, dtypes; no data; symbolic sizes where dynamic). The other compile hooks
(``sdk_decompositions`` to ``sdk_render_kernel``, ``sdk_claim_nodes``, ``sdk_cache_key``,
``sdk_kernel_choices``) run inside it: read metadata there, make no tensors. A compiled
function (``KernelFn``, ``CompiledSubgraph.fn``) is called with real tensors; a graph-level
plugin's function is called with no Python dispatch mode active (AOTAutograd checks a
program's first call under one), so a runtime that calls ATen itself is not seen by it.
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
        ClaimGroups,
        CompileContext,
        CompiledSubgraph,
        GraphPass,
        KernelChoices,
        KernelFn,
        KernelLimits,
        KernelSource,
        PluginInfo,
        Preferences,
        Support,
    )
    from sdk.report import GraphReport

PROJECT = "sdk"
hookspec = pluggy.HookspecMarker(PROJECT)
#: The entry-point group a plugin's wheel names the module of its hooks under
#: (``[project.entry-points."sdk.plugins"]`` in its pyproject.toml)
ENTRY_POINT_GROUP = "sdk.plugins"


# ---------------------------------------------------------------------------
# Identity: called on one plugin at a time
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_plugin_info() -> PluginInfo:
    """Describe the plugin: name, version, hook-API version, devices, kind, capabilities.

    Called once, right after the plugin module is imported and registered, and
    before any other hook. A plugin whose ``hook_api`` the core does not support
    is unregistered and listed as unavailable.

    :return: a :class:`sdk.PluginInfo` whose ``name`` is the plugin's entry-point name and
        whose ``hook_api`` is a literal (the version written against, not
        ``sdk.HOOK_API_VERSION``). Stops at first non-None result (each plugin answers for
        itself only).
    :raises: an exception, or a return value that is not a PluginInfo, makes the plugin
        unavailable with that reason.

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
        GPU machine or set TRITON_INTERPRET=1 to run kernels on CPU tensors"``. Where it
        runs but cannot compile here (no compiler), that reason as an
        :class:`sdk.CompileUnavailable`: the plugin stays usable, the programs the caches
        hold run, and a graph or partition that needs a compile runs in the chain or ATen,
        with one warning per process. Stops at first non-None result.
    :raises: an exception makes the plugin unavailable, with the error as the reason.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_preferences() -> Preferences | None:
    """Say what the plugin prefers the core to make: a channels-last layout around library
    convolutions, a product's or convolution's bias added in the generated kernel, recomputing
    transcendentals. The core's output computes the same either way; only its speed on the
    device differs (:class:`sdk.Preferences` says what each field makes the core do)::

        @sdk.hookimpl
        def sdk_preferences():
            return sdk.Preferences(channels_last=True, mm_bias_in_kernel=True)

    Called once, when the plugin is loaded (after ``sdk_plugin_info``); the core reads the
    answer as ``ctx.preferences`` in every compile (and only there: no capability stands for
    a preference since hook API 6). A plugin of hook API 5 or earlier that does not answer
    gets the preferences it declared as ``Capability`` members
    (``Capability.CHANNELS_LAST``), with one :class:`sdk.SDKDeprecationWarning`.

    :return: a :class:`sdk.Preferences`, or None for its defaults (all off). Stops at first
        non-None result (each plugin answers for itself only).
    :raises: an exception, or a return value that is not a Preferences, makes the plugin
        unavailable with that reason.

    Appeared in hook-API version 6.
    """


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
        this compile goes to the chain or ATen (see the module doc).

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
    raises too, and the kernel's ``IndexError`` reaches the caller (see "run time" in the
    module doc). ``sdk.clike.launchers`` makes such callables for C-like kernels.

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
    tensors and real ones" above). ``ctx.threads`` is the intra-op thread count the
    compiled function should use (``torch.get_num_threads()`` when the compile began).

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

    :param ctx: the compile (``ctx.plugin`` is the codegen plugin that made ``compiled``;
        ``ctx.written_inputs``: the inputs ``compiled`` writes in place, which a wrapper
        that runs it on copies must copy back, and must not write more than once a call).
    :param compiled: the compiled graph as the core would run it.
    :return: the callable to run. Stops at first non-None result.
    :raises: an exception leaves the graph unwrapped (strict mode: :class:`sdk.PluginHookError`).

    API version: 1.
    """


# ---------------------------------------------------------------------------
# Observers: every available plugin
# ---------------------------------------------------------------------------


@hookspec
def sdk_on_graph_compiled(ctx: CompileContext, report: GraphReport) -> None:
    """A graph finished compiling (after its wrappers).

    :param ctx: the graph's compile (``ctx.plugin``: the codegen plugin of the compile).
    :param report: the graph's :class:`sdk.GraphReport` (``sdk.report.GraphReport``): its
        kernels, library calls, fallbacks and their reasons, as ``sdk.explain`` prints
        them. Read it; do not change it.
    :return: ignored. 1:N: every available plugin is told.
    :raises: a fault of this plugin's only (see the module doc).

    API version: 1.
    """


@hookspec
def sdk_on_kernel_compiled(ctx: CompileContext, source: KernelSource) -> None:
    """A kernel was rendered and compiled.

    :param ctx: the graph's compile.
    :param source: what the codegen plugin's ``sdk_render_kernel`` returned for it.
    :return: ignored. 1:N: every available plugin is told.
    :raises: a fault of this plugin's only (see the module doc).

    API version: 1.
    """


@hookspec
def sdk_on_fallback(ctx: CompileContext, op: str, reason: str) -> None:
    """An ATen op runs through the op-level fallback instead of a generated kernel.

    :param ctx: the graph's compile.
    :param op: the op's name, ``"aten.mul.Tensor"``.
    :param reason: why (the refusal, the missing lowering, the hook that failed).
    :return: ignored. 1:N: every available plugin is told.
    :raises: a fault of this plugin's only (see the module doc).

    API version: 1.
    """


__all__ = [name for name in dir() if name.startswith("sdk_")] + ["hookspec", "PROJECT"]
