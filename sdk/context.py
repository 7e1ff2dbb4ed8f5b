"""What a hook knows of the compile it is called for, and what a codegen plugin declares
about one compile.

Every hook that concerns one compile receives a :class:`CompileContext`; a plugin bounds its
kernels with :class:`KernelLimits` (``sdk_kernel_limits``) and names its own rewrites of the
ATen graph with :class:`GraphPass` (``sdk_graph_passes``). All are importable from ``sdk`` and
``sdk.plugin`` too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sdk.capabilities import Capability, Preferences
from sdk.options import CoreOptions, PluginOptions


@dataclass(frozen=True)
class KernelLimits:
    """What one generated kernel may take at most: the answer of ``sdk_kernel_limits``.

    A device with a fixed number of pointer registers, DMA channels or kernel parameters
    declares it here, and the core's scheduler keeps every kernel within it: it does not
    fuse two groups whose merged kernel would exceed a limit (the fusion is refused with
    the reason, in :attr:`sdk.GraphReport.fusion_refusals`), and does not recompute a
    producer inside a reader that would then exceed it. An ATen op whose kernel exceeds a
    limit on its own (a ``torch.where`` of three tensors under ``max_buffers=3``) runs
    through the op-level ATen fallback, with the reason in the graph's report.

    ``None`` means no limit. Counts are of distinct buffers, as in ``Kernel.args``: a
    buffer a kernel both reads and writes counts once in ``max_buffers``, in each of
    ``max_inputs`` and ``max_outputs``. Size arguments (``Kernel.size_args``) are not
    buffers and do not count.
    """

    #: distinct buffers (pointer arguments) a kernel reads or writes
    max_buffers: int | None = None
    #: distinct buffers a kernel reads
    max_inputs: int | None = None
    #: distinct buffers a kernel writes
    max_outputs: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_buffers", "max_inputs", "max_outputs"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"KernelLimits.{name} is {value!r}; it must be a positive int, or None "
                    "for no limit"
                )

    def exceeded(self, inputs: int, outputs: int, buffers: int) -> str | None:
        """Which limit a kernel of these counts exceeds, as a phrase, or None."""
        for limit, count, what in (
            (self.max_buffers, buffers, "buffer arguments"),
            (self.max_inputs, inputs, "input buffers"),
            (self.max_outputs, outputs, "output buffers"),
        ):
            if limit is not None and count > limit:
                return f"{count} {what}, over the limit of {limit}"
        return None


@dataclass(frozen=True)
class CompileContext:
    """What a hook may know about the compile it is called for."""

    plugin: str  # the codegen plugin doing this compile
    device_type: str  # device of the graph's tensors
    graph_kind: str  # "forward", "backward" or "inference"
    graph_name: str
    #: every option of the compile by name, read-only: the core's (as in :attr:`core_options`)
    #: and the plugin's own (as in :attr:`plugin_options`). Kept for plugins written before
    #: the typed views; read those instead
    options: Mapping[str, Any]
    capabilities: frozenset[Capability]
    #: what :meth:`note` recorded; ``sdk.explain`` shows it under the graph
    notes: list[str] = field(default_factory=list, compare=False, repr=False)
    #: the positions of the graph's inputs that running the compiled graph writes in place
    #: (BatchNorm's running statistics in a training step: AOTAutograd keeps such writes in
    #: the graph for a codegen plugin, and its kernels do them). A wrapper that runs the
    #: graph on copies of its inputs must copy these back after each run, and must not run
    #: the graph on the caller's inputs more often than it is called.
    written_inputs: frozenset[int] = field(default_factory=frozenset, compare=False)
    #: the core's options, parsed (``ctx.core_options.debug``; ``SDK_DEBUG=1`` included).
    #: Left out (a context built by hand, in a test), made from :attr:`options`
    core_options: CoreOptions = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    #: the plugin's own options, parsed (``ctx.plugin_options.unroll``). Left out, made from
    #: the names of :attr:`options` that are not the core's
    plugin_options: PluginOptions = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    #: what the plugin prefers (its ``sdk_preferences`` answer; hook API 6)
    preferences: Preferences = field(default_factory=lambda: Preferences(), compare=False)
    #: how many threads the plugin's code should use for one op (its runtime's intra-op
    #: pool, OpenMP's ``num_threads``): ``torch.get_num_threads()`` when the compile began,
    #: so the plugin keeps to what the user gave torch (``torch.set_num_threads``) and its
    #: pool does not fight torch's. 0 in a context built by hand: ask torch
    threads: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.core_options is None or self.plugin_options is None:
            core, own = _split_options(self.plugin, self.options)
            if self.core_options is None:
                object.__setattr__(self, "core_options", core)
            if self.plugin_options is None:
                object.__setattr__(self, "plugin_options", own)

    def has(self, capability: Capability) -> bool:
        return capability in self.capabilities

    def note(self, message: str) -> None:
        """Tell the user something about this graph through ``sdk.explain``.

        For what changes how the graph runs but is no error: a wrapper that
        could not apply (a graph CUDA graphs cannot capture runs uncaptured),
        a slower path taken. May be called at compile time or on a later call.
        """
        if message not in self.notes:
            self.notes.append(message)


@dataclass(frozen=True)
class GraphPass:
    """One named rewrite of the ATen graph, run before the graph is lowered: an entry of
    the list ``sdk_graph_passes`` answers (hook API 5).

    The core's own passes are such entries (``relu_into_addmm``: a ReLU whose only input is
    an ``addmm`` becomes one ``aten._addmm_activation`` call; ``mm_bias_into_kernel`` and
    ``conv_bias_into_kernel``, for plugins whose ``sdk_preferences`` answer
    ``Preferences(mm_bias_in_kernel=True)`` and ``Preferences(conv_bias_in_kernel=True)``: a
    product's or convolution's bias added by a pointwise ``aten.add`` the generated kernels
    take). A plugin adds its own the same way.

    ``fn(gm, ctx)`` is called once per compiled graph variant with ``gm``, a
    ``torch.fx.GraphModule`` of ATen calls (the core's own copy: rewrite ``gm.graph`` in
    place; the graph the op-level fallback runs is not this one), and the compile's
    :class:`CompileContext`. It returns how many places it rewrote (an ``int``, 0 when it
    changed nothing), which ``sdk.explain`` prints (``passes: double_to_add (sdk:acme): 2
    rewrites``). Rules:

    * keep what the graph computes: a pass changes how, never what (the core may leave one
      out, see below);
    * give every call node you add ``node.meta["val"]``, the fake tensor it produces (the
      one of the node it replaces, or ``x.meta["val"]`` computed on: fake tensors have
      shapes, dtypes and strides, no data), as lowering reads it; a node may also carry
      ``node.meta["sdk_origins"]``, the ``"name: aten.op.overload"`` strings of the nodes
      it stands for, which reports then name instead of it;
    * leave alone the call nodes your ``sdk_extern`` answered for: it was asked before the
      passes ran, by node name.

    After each pass of a plugin the core checks the graph (``gm.graph.lint()``, a
    ``meta["val"]`` on every call node, the count an ``int``). A pass that raises or fails
    those checks is left out: the graph is rewritten again from the start without it, and
    the fault is the plugin's, in the graph's report (``GraphReport.hook_faults``, as an
    observer's); strict mode (``fallback=False`` or ``debug``) raises
    :class:`sdk.PluginHookError` instead. An :class:`sdk.SDKError` it raises reaches the
    caller as it is.

    ``name`` is a Python identifier, unique in the list; ``description`` is one line.
    """

    name: str
    description: str
    fn: Callable[[Any, CompileContext], int]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"GraphPass name {self.name!r} must be a Python identifier")
        if not isinstance(self.description, str) or "\n" in self.description:
            raise ValueError(
                f"GraphPass {self.name}: the description must be one line of text, got "
                f"{self.description!r}"
            )
        if not callable(self.fn):
            raise TypeError(
                f"GraphPass {self.name}: fn must be callable as fn(gm, ctx) -> int, got a "
                f"{type(self.fn).__name__}"
            )


def _split_options(plugin: str, options: Mapping[str, Any]) -> tuple[CoreOptions, PluginOptions]:
    """A hand-built context's ``options`` as the typed pair (the core builds both itself)."""
    core = {f.name for f in fields(CoreOptions)}
    given = {k: v for k, v in options.items() if k in core}
    for name in ("wrappers", "chain"):
        if name in given:
            given[name] = tuple(given[name])
    return CoreOptions(**given), PluginOptions.of(
        plugin, {k: v for k, v in options.items() if k not in core}
    )
