"""The public value types a plugin exchanges with the core.

Everything here is plain data: frozen dataclasses and enums. A plugin builds a
:class:`PluginInfo` once, answers support and fusion questions with :class:`Support`
(``Support.yes()``, ``Support.no(reason)``), states what it prefers with
:class:`Preferences`, names its own rewrites of the ATen graph with
:class:`GraphPass`, and receives a :class:`CompileContext` in every hook that concerns one
compile.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import keyword
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any, ClassVar

from sdk import _config
from sdk.subgraph import (  # noqa: F401  (graph-level values; Support: a plugin's answer)
    ClaimGroups,
    CompiledSubgraph,
    Support,
)

#: Version of the hook API described in :mod:`sdk.hookspecs`. A plugin states
#: the version it was written for in :attr:`PluginInfo.hook_api`; the core
#: accepts plugins whose version lies in :data:`SUPPORTED_HOOK_APIS`.
HOOK_API_VERSION = 7  # 2: sdk_cache_key; 3: graph-level plugins (sdk_claim_nodes...);
# 4: sdk_kernel_limits, sdk_can_fuse's ``merged``, sdk_extern; 5: sdk_graph_passes, GraphPass;
# 6: sdk_preferences and Preferences, Capability's preferences and dead members retired,
# the alias Verdict gone; sdk_kernel_choices, KernelChoices, KernelVariant (measured kernel
# choices); 7: graph-level contract: sdk_claim_nodes may answer ClaimGroups (the plugin's own
# partitions, with a minimum size), PluginInfo.frozen_parameters (parameters as constants of
# inference partitions), CompiledSubgraph.preallocated_outputs and .aliases (output buffers)
SUPPORTED_HOOK_APIS = range(1, HOOK_API_VERSION + 1)


class PluginKind(str, enum.Enum):
    """What a plugin does in a compile."""

    CODEGEN = "codegen"  # lowers, fuses and renders kernels: becomes `sdk:<name>`
    WRAPPER = "wrapper"  # wraps a compiled graph made by a codegen plugin
    GRAPH = "graph"  # compiles whole subgraphs with its own compiler: becomes `sdk:<name>`


class _CapabilityType(enum.EnumMeta):
    """:class:`Capability`'s metaclass: a member retired in hook API 6 is still a name of the
    class (``Capability.FP64``), a :class:`RetiredCapability`, so that a plugin written for hook
    API 5 or earlier still imports and loads (the registry translates it, with one warning)."""

    def __getattr__(cls, name: str) -> Any:
        if not name.startswith("_") and name in _RETIRED:
            return _RETIRED[name]
        raise AttributeError(name)


class Capability(str, enum.Enum, metaclass=_CapabilityType):
    """Abilities a plugin declares in :attr:`PluginInfo.capabilities`: what its renderer (or
    wrapper) can take. The core asks these, never the device name, and does not make what a
    plugin did not declare.

    Each member's docstring (``Capability.REDUCTIONS.__doc__``) says what declaring it makes
    the core do. The value (``"reductions"``) is what ``Capability("reductions")`` accepts.

    Hook API 6 kept only these, the enforced ones. What a plugin *prefers* (the core's output
    is correct either way, only its speed differs) is :class:`Preferences`, the answer of the
    hook ``sdk_preferences``. The members that changed nothing (``FP64``, ``BF16``,
    ``INDIRECT_LOADS``, ``RANDOM``: the core hands a plugin such kernels either way, and a
    plugin that cannot render them refuses those ops in ``sdk_op_support``) are gone. Both
    kinds remain *names* of the class (``Capability.CHANNELS_LAST``), as
    :class:`RetiredCapability` values, so that a plugin of hook API 5 or earlier imports and
    behaves as before: the core reads a retired preference it declares as that preference,
    and warns once (:class:`sdk.SDKDeprecationWarning`) with the fix. A plugin of hook API 6
    that declares one is unavailable, with the reason.
    """

    def __new__(cls, value: str, doc: str) -> Capability:
        member = str.__new__(cls, value)
        member._value_ = value
        member.__doc__ = doc
        return member

    REDUCTIONS = (
        "reductions",
        "The renderer fuses reduction stages (``sdk.ir.Reduction``) with other work: the "
        "scheduler fuses a reduction with its producers and readers. Without it every "
        "reduction is a kernel of its own (still rendered by the plugin: refuse reductions "
        "in ``sdk_op_support`` to send them to ATen), and the conformance suite skips its "
        "reduction fusion check.",
    )
    MULTI_STAGE = (
        "multi_stage",
        "A kernel may hold several reduction stages per outer point, run in order (a "
        "softmax's max, then sum, then store, in one kernel). Without it the scheduler "
        "makes no fusion that needs more than one stage (a softmax is several kernels).",
    )
    STORE_THEN_LOAD = (
        "store_then_load",
        "A later stage of a kernel may load, at the same outer point, what an earlier "
        "stage stored there (one thread runs a row's stages in order: true in C++, not "
        "in Triton). The core then stores an expensive value once and loads it back in "
        "the later stage (a softmax's exp(x - max): one exp per element instead of two). "
        "Without it a later stage recomputes the value.",
    )
    SYMBOLIC_SIZES = (
        "symbolic_sizes",
        "Kernels may have symbolic sizes (``sdk.ir.size_var``): the renderer takes each of "
        "a kernel's ``size_args`` as an integer argument after the buffers, so one "
        "compiled program serves every size of a dynamic dimension. Without it the core "
        "compiles a variant per concrete shape.",
    )
    GRAPH_CAPTURE = (
        "graph_capture",
        "For wrapper plugins: the wrapper replays whole graphs (CUDA graphs). "
        '``mode="reduce-overhead"`` (and ``"max-autotune"``) applies every available '
        "wrapper that declares it.",
    )


class RetiredCapability(str):
    """A member of :class:`Capability` that hook API 6 retired (``Capability.FP64``,
    ``Capability.CHANNELS_LAST``): equal to its old value (``"fp64"``), accepted in
    :attr:`PluginInfo.capabilities` from plugins of hook API 5 or earlier only. ``preference``
    is the :class:`Preferences` field it became, or ``""`` for a member that changed nothing."""

    name: str
    preference: str

    def __new__(cls, name: str, value: str, preference: str = "") -> RetiredCapability:
        self = str.__new__(cls, value)
        self.name, self.preference = name, preference
        return self

    def __repr__(self) -> str:
        return f"Capability.{self.name} (retired in hook API 6)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (getattr, (Capability, self.name))

    @property
    def value(self) -> str:
        return str(self)


#: the members hook API 6 retired, by name: the preferences with their field of
#: :class:`Preferences`, then those that changed nothing
_RETIRED: dict[str, RetiredCapability] = {
    r.name: r
    for r in (
        RetiredCapability("CHANNELS_LAST", "channels_last", "channels_last"),
        RetiredCapability("CONV_BIAS_IN_KERNEL", "conv_bias_in_kernel", "conv_bias_in_kernel"),
        RetiredCapability("MM_BIAS_IN_KERNEL", "mm_bias_in_kernel", "mm_bias_in_kernel"),
        RetiredCapability(
            "CHEAP_TRANSCENDENTALS", "cheap_transcendentals", "cheap_transcendentals"
        ),
        RetiredCapability("FP64", "fp64"),
        RetiredCapability("BF16", "bf16"),
        RetiredCapability("INDIRECT_LOADS", "indirect_loads"),
        RetiredCapability("RANDOM", "random"),
    )
}
_RETIRED_BY_VALUE = {str(r): r for r in _RETIRED.values()}


@dataclass(frozen=True)
class Preferences:
    """What a plugin prefers the core to make: the answer of ``sdk_preferences`` (hook API 6).

    The core's output computes the same with any of these; only its speed on the device
    differs. Every field defaults to ``False``, the core's choice for a plugin that does not
    answer (a CPU's). The core reads them as ``ctx.preferences`` (a plugin may too).
    """

    #: the device's library convolutions are faster on channels-last activations: the core
    #: picks that layout once per graph (inference graphs with convolutions, by Inductor's
    #: FLOP-weighted rule) and converts only at the graph's edges. The option
    #: ``channels_last`` overrides it either way
    channels_last: bool = False
    #: a convolution's bias is added in the generated kernel that follows the library call
    #: (with BatchNorm, activation and residual), not by the library call itself: the core's
    #: graph pass ``conv_bias_into_kernel`` runs for the plugin
    conv_bias_in_kernel: bool = False
    #: a matrix product with a bias (``addmm``) whose result only pointwise ops read becomes a
    #: product without the bias (``mm``), the bias added in the generated kernel of those ops
    #: (Inductor's rule on GPUs: the library then picks its product kernel without a bias
    #: epilogue); a product the plugin's ``sdk_extern`` takes stays whole. The core's graph
    #: pass ``mm_bias_into_kernel`` does it
    mm_bias_in_kernel: bool = False
    #: transcendental functions (``sdk.ir.TRANSCENDENTAL``: sin, exp, erf, ...) cost about as
    #: much as a load (a GPU's special-function units): the core may recompute a value that
    #: uses them at every point of a larger reader that broadcasts it. Without it that value
    #: is stored once (the rotary embedding's cos/sin, read over every head)
    cheap_transcendentals: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, bool):
                raise TypeError(f"Preferences.{f.name} is {value!r}; it must be True or False")

    @staticmethod
    def of_retired(capabilities: frozenset[Any]) -> Preferences:
        """The preferences a plugin of hook API 5 or earlier declared as capabilities."""
        return Preferences(
            **{
                c.preference: True
                for c in capabilities
                if isinstance(c, RetiredCapability) and c.preference
            }
        )


@dataclass(frozen=True)
class OptionSpec:
    """One option a plugin accepts through ``torch.compile(options=...)``.

    ``examples``: other values the option may take, which the conformance suite compiles
    with (a ``bool`` option is tried flipped and an ``int`` one at ``default + 1`` without
    them; an option of another type is checked only with them).
    """

    default: Any
    doc: str
    type: type | tuple[type, ...] = object
    examples: tuple[Any, ...] = ()


class _Options:
    """What :class:`CoreOptions` and :class:`PluginOptions` share: the values as a dict, and
    a digest of them that is the same in every process (the whole-graph cache's key holds
    it; Python's ``hash()`` of a string changes from process to process)."""

    def as_dict(self) -> dict[str, Any]:
        """The options by name (a new dict: changing it changes nothing)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def hash(self) -> str:
        """A hex digest of the options' names and values (their ``repr``), as Triton's
        backends key their options."""
        text = repr(sorted(self.as_dict().items()))
        return hashlib.sha256(f"{type(self).__name__}|{text}".encode()).hexdigest()


@dataclass(frozen=True)
class CoreOptions(_Options):
    """The core's options of one compile, parsed once from ``mode=`` and ``options=`` and the
    SDK's environment variables: ``ctx.core_options``. Read them by attribute
    (``ctx.core_options.debug``); the core's option table (the vendor guide, "Options") says
    what each does. ``debug`` is already the ``debug`` option or ``SDK_DEBUG=1``, and ``cache``
    the ``cache`` option unless ``SDK_GRAPH_CACHE=0``: a plugin reads no variable for them."""

    fallback: bool = True
    fusion: bool = True
    debug: bool = False
    #: wrapper plugin names, or a :class:`Capability` for every wrapper that declares it
    wrappers: tuple[Any, ...] = ()
    chain: tuple[str, ...] = ()
    min_partition_size: int = 1
    autotune: bool = False
    cache: bool = True
    #: "native" (the SDK's C++ runner where it builds) or "python" (the step interpreter)
    runner: str = "native"
    channels_last: bool | None = None
    #: seconds each compiled graph variant may spend measuring the kernel choices its plugin
    #: offers (``sdk_kernel_choices``); None: automatic (a share of the graph's compile time,
    #: or a large budget with ``autotune``); 0: measure nothing
    tune_budget_s: float | None = None
    #: graph-level plugins: compile each partition in a worker process (``PluginInfo.
    #: isolate_compile``); None: as the plugin declares
    isolate_compile: bool | None = None

    @property
    def strict(self) -> bool:
        """Strict mode: ``fallback`` off or ``debug`` on. What the core otherwise recovers
        from (a hook that raises, a partition that fails) raises instead."""
        return not self.fallback or self.debug


#: the names :class:`PluginOptions` keeps for itself: no plugin option may take them
RESERVED_OPTION_NAMES = frozenset({"as_dict", "hash", "plugin"})


@dataclass(frozen=True)
class PluginOptions(_Options):
    """A plugin's own options of one compile (those it declares in
    :attr:`PluginInfo.options`), parsed once: ``ctx.plugin_options``. A frozen dataclass of
    its own per plugin, with a field per declared option (``ctx.plugin_options.unroll``),
    at its default unless the user gave another value. Its :meth:`hash` is part of the
    whole-graph cache's key."""

    #: the plugin whose options these are
    plugin: ClassVar[str] = ""

    @staticmethod
    def of(plugin: str, values: Mapping[str, Any], declared: type | None = None) -> PluginOptions:
        """``values`` as ``plugin``'s options type (one class per plugin and option names);
        ``declared``: the plugin's own options dataclass (:mod:`sdk.options`), of which the
        result is an instance."""
        if declared is not None:
            from sdk.options import declared_type

            return declared_type(plugin, declared)(**values)
        return _options_type(plugin, tuple(sorted(values)))(**values)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PluginOptions.of, (self.plugin, self.as_dict()))


@functools.lru_cache(maxsize=256)
def _options_type(plugin: str, names: tuple[str, ...]) -> type[PluginOptions]:
    bad = [
        n
        for n in names
        if not n.isidentifier() or keyword.iskeyword(n) or n in RESERVED_OPTION_NAMES
    ]
    if bad:
        raise ValueError(
            f"plugin {plugin!r} declares option(s) {bad}: an option's name must be a Python "
            f"identifier, not a keyword nor one of {sorted(RESERVED_OPTION_NAMES)}; rename "
            "them in its PluginInfo"
        )
    title = "".join(part.capitalize() for part in plugin.split("_")) or "Plugin"
    cls = make_dataclass(
        f"{title}Options",
        [(n, Any) for n in names],
        bases=(PluginOptions,),
        frozen=True,
        namespace={"plugin": plugin},
    )
    cls.__module__ = __name__
    return cls


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


@dataclass(frozen=True)
class PluginInfo:
    """A plugin's identity, returned by ``sdk_plugin_info``."""

    name: str
    version: str
    hook_api: int
    device_types: tuple[str, ...]
    kind: PluginKind = PluginKind.CODEGEN
    capabilities: frozenset[Capability] = frozenset()
    #: the plugin's own options: a dict of :class:`OptionSpec` by name, or a frozen dataclass
    #: of the plugin's (:mod:`sdk.options`), which becomes that dict (and
    #: :attr:`options_class`): ``ctx.plugin_options`` is then an instance of it
    options: Mapping[str, OptionSpec] = field(default_factory=dict)
    description: str = ""
    #: ATen ops whose kernels on this plugin's devices may give other bits from run to run
    #: (atomic adds: the order of the additions changes), by op name (``"aten.index_add"``)
    #: with why. ``sdk.explain`` lists each library call or fallback of one among the graph's
    #: non-deterministic steps. (Under ``torch.use_deterministic_algorithms(True)`` ATen
    #: takes its deterministic kernel for such an op, or raises naming it, as in eager.)
    nondeterministic_ops: Mapping[str, str] = field(default_factory=dict)
    #: graph-level plugins (hook API 7): in an *inference* graph (``ctx.graph_kind ==
    #: "inference"``: no input needs grad, ``torch.no_grad()``), a partition input that is
    #: an ``nn.Parameter`` or a buffer of the model (``register_buffer``: BatchNorm's running
    #: statistics in eval mode) arrives as a constant, not an input: the partition's
    #: GraphModule reads it with a ``get_attr`` node whose attribute is its value at compile
    #: time (a real tensor, detached), so the plugin can prepack or fold it. Its placeholder
    #: is gone: ``example_inputs`` and the compiled ``fn``'s arguments are the other inputs
    #: only. The core checks each frozen tensor's identity and version (``tensor._version``)
    #: on every call and compiles the partition again when one was replaced
    #: (``model.fc.weight = nn.Parameter(...)``, ``bn.running_mean = torch.zeros(n)``) or
    #: written in place (``weight.add_(1)`` under ``no_grad``, ``bn.running_mean.add_(1)``).
    #: A parameter or buffer the graph itself writes (BatchNorm's running statistics in
    #: training mode under ``no_grad``) stays an input, and forward and backward (training)
    #: graphs keep parameters and buffers as inputs. ``sdk_compile_subgraph`` is then called
    #: outside the compile's fake mode (tensors it makes are real); the whole-graph cache keys
    #: the partition on the values' digests too (sha256, once per tensor and version)
    frozen_parameters: bool = False
    #: graph-level plugins (hook API 7): run ``sdk_compile_subgraph`` in a worker process of
    #: its own per partition, so that a compiler that crashes (a segfault, an ``abort()``)
    #: takes the worker, not the user's process: the partition then falls back (the next
    #: plugin of the chain, else ATen) with the signal in its reason. The hook is called
    #: there as here, on the partition's graph (its ``meta["val"]`` fake tensors of the same
    #: layouts; concrete sizes only: a symbolic partition is compiled per shape) and must
    #: return an ``artifact`` (bytes), which ``sdk_load_subgraph`` turns into the callable in
    #: the user's process; ``fn`` is not used. The user's option ``isolate_compile`` overrides
    #: this (True for any graph-level plugin, False to compile in process)
    isolate_compile: bool = False
    #: the options dataclass the plugin declared as :attr:`options` (None: a dict of specs)
    options_class: type | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"plugin name {self.name!r} must be a Python identifier")
        if isinstance(self.options, type):
            from sdk.options import specs_of

            object.__setattr__(self, "options_class", self.options)
            object.__setattr__(self, "options", specs_of(self.options))
        object.__setattr__(self, "kind", PluginKind(self.kind))
        object.__setattr__(self, "capabilities", self._capabilities())
        object.__setattr__(self, "device_types", tuple(self.device_types))

    def _capabilities(self) -> frozenset[Capability]:
        """The declared capabilities as members; a retired one (hook API 5 or earlier only)
        as its :class:`RetiredCapability`, so that ``ctx.has(Capability.FP64)`` answers as it
        did."""
        out: set[Any] = set()
        for c in self.capabilities:
            retired = _RETIRED_BY_VALUE.get(c) if isinstance(c, str) else None
            if retired is None:
                out.add(Capability(c))
            elif isinstance(self.hook_api, int) and self.hook_api >= 6:
                raise ValueError(
                    f"plugin {self.name!r} (hook_api={self.hook_api}) declares "
                    f"Capability.{retired.name}, which hook API 6 retired: "
                    + retired_fix([retired], upgrade=False)
                )
            else:
                out.add(retired)
        return frozenset(out)

    @property
    def retired_capabilities(self) -> frozenset[RetiredCapability]:
        """The capabilities hook API 6 retired that this plugin (of hook API 5 or earlier)
        declares."""
        return frozenset(c for c in self.capabilities if isinstance(c, RetiredCapability))


def retired_fix(retired: Any, *, upgrade: bool = True) -> str:
    """What a plugin declaring the retired capabilities ``retired`` does instead."""
    prefs = sorted(r.preference for r in retired if r.preference)
    dead = sorted(f"Capability.{r.name}" for r in retired if not r.preference)
    parts = []
    if prefs:
        args = ", ".join(f"{p}=True" for p in prefs)
        parts.append(
            f"return sdk.Preferences({args}) from an sdk_preferences hook instead "
            "(a preference: the core's output is correct either way)"
        )
    if dead:
        parts.append(
            f"drop {', '.join(dead)} (the core never read it: refuse the ops you cannot "
            "render in sdk_op_support)"
        )
    if upgrade:
        parts.append('then declare hook_api=6 (docs/vendor-guide.md, "Versioning")')
    return "; ".join(parts)


class CompileUnavailable(str):
    """An answer of ``sdk_plugin_status``: the plugin runs here, but cannot compile (no
    compiler, a toolchain that is not installed), and this is why, with the fix::

        @sdk.hookimpl
        def sdk_plugin_status():
            try:
                sdk.toolchain.find_compiler("c")
            except FileNotFoundError as exc:
                return sdk.CompileUnavailable(str(exc))
            return None

    The plugin stays usable: every graph (and partition) whose program is in the caches runs
    compiled (the whole-graph cache; ``sdk_compile_kernels`` is still called on a hit, to
    load the kernels its own cache keeps, and ``sdk_load_subgraph`` for a partition), and
    one that needs a compile runs in the next plugin of ``options["chain"]``, else ATen, with
    this reason in ``sdk.explain`` and one :class:`sdk.PluginFallbackWarning` per process.
    For that, ``sdk_cache_key`` must answer without the compiler (the key it answered when
    the programs were compiled: :func:`sdk.toolchain.cache_key` does). A ``str``, so that
    whatever reads the answer as a plain reason still can."""

    __slots__ = ()


def environment_variable(name: str) -> str | None:
    """The environment variable ``name`` now, or None when unset: a plugin's own switches
    (``TRITON_INTERPRET``, a compiler path) read through the SDK's one reader of the
    environment, ``sdk._config``."""
    return _config.variable(name)


def _removed_verdict() -> type[Support]:
    """``sdk.Verdict`` (and ``sdk.plugin.Verdict``), removed in hook API 6: :class:`Support`,
    with a warning at the line that named it (a module ``__getattr__`` calls this)."""
    import warnings

    from sdk.errors import SDKDeprecationWarning

    warnings.warn(
        "sdk.Verdict was removed in hook API 6; it is sdk.Support (answer sdk_can_fuse "
        "with sdk.Support.yes() or sdk.Support.no(reason))",
        SDKDeprecationWarning,
        stacklevel=3,
    )
    return Support


def __getattr__(name: str) -> Any:
    if name == "Verdict":
        return _removed_verdict()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    ``conv_bias_into_kernel``, for plugins declaring ``Capability.MM_BIAS_IN_KERNEL`` and
    ``Capability.CONV_BIAS_IN_KERNEL``: a product's or convolution's bias added by a
    pointwise ``aten.add`` the generated kernels take). A plugin adds its own the same way.

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


@dataclass
class KernelSource:
    """A rendered kernel: what ``sdk_render_kernel`` returns.

    ``entry`` is the symbol the compiled artifact exposes; ``meta`` carries
    whatever the plugin's own compile step needs (launch grid, argument kinds).
    """

    name: str
    language: str  # "c++", "triton", ...
    source: str
    entry: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelVariant:
    """One other way to run a kernel: an entry of :attr:`KernelChoices.alternatives`.

    ``source`` is the kernel rendered with this choice (another launch configuration in its
    ``meta``, another block size in its text): it takes the same buffers and size arguments
    as the rendered kernel and computes the same values. ``label`` is what ``sdk.explain``
    shows for it (``"XBLOCK=64 num_warps=4"``); one line, unique among the kernel's choices.
    """

    label: str
    source: KernelSource

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label or "\n" in self.label:
            raise ValueError(f"KernelVariant label must be one non-empty line, got {self.label!r}")
        if not isinstance(self.source, KernelSource):
            raise TypeError(
                f"KernelVariant {self.label}: source must be an sdk.KernelSource, got a "
                f"{type(self.source).__name__}"
            )


@dataclass(frozen=True)
class KernelChoices:
    """What ``sdk_kernel_choices`` answers for one kernel (hook API 6): other ways to run it,
    for the core to time against the one ``sdk_render_kernel`` rendered.

    ``alternatives``: a few :class:`KernelVariant` s (the rendered kernel is not among them:
    the core times it too, labelled ``default``). ``synchronize``: a function that returns
    once every kernel launched so far has finished (the device's queue drained, e.g. the
    device runtime's ``synchronize``), with which the core's wall-clock timer measures device
    time; None where a kernel's call returns when its work is done (a CPU). ``default``: the
    rendered kernel's label in ``sdk.explain``.
    """

    alternatives: tuple[KernelVariant, ...]
    synchronize: Callable[[], Any] | None = None
    default: str = "default"

    def __post_init__(self) -> None:
        alts = tuple(self.alternatives)
        object.__setattr__(self, "alternatives", alts)
        for a in alts:
            if not isinstance(a, KernelVariant):
                raise TypeError(
                    f"KernelChoices.alternatives holds a {type(a).__name__}; give "
                    "sdk.KernelVariant(label, source) entries"
                )
        labels = [self.default, *(a.label for a in alts)]
        if len(set(labels)) != len(labels):
            raise ValueError(f"KernelChoices labels must be unique, got {labels}")
        if self.synchronize is not None and not callable(self.synchronize):
            raise TypeError(
                f"KernelChoices.synchronize must be callable or None, got a "
                f"{type(self.synchronize).__name__}"
            )


#: A compiled kernel, one per source of ``sdk_compile_kernels``: called as
#: ``fn(*buffers, *sizes)``, the kernel's tensors in the order of ``Kernel.args``, then one
#: Python int per symbol of ``Kernel.size_args`` (the run's symbolic sizes, each >= 2; none
#: for static sizes); writes its output buffers and returns nothing. It raises
#: ``IndexError`` (naming the kernel) for an input out of range, as eager raises for it;
#: what the core does with an exception at run time is in :mod:`sdk.hookspecs`.
KernelFn = Callable[..., None]


@dataclass(frozen=True)
class NativeEntry:
    """A kernel's C entry point, for the native runner (``core/runner.cpp``): a compiled
    :data:`KernelFn` that carries one as its attribute ``native`` is launched by the runner
    without Python (one Python->C++ crossing per graph call, not per kernel); one without
    it makes its graph's program run in Python. ``sdk.toolchain.launcher`` sets it.

    Two calling conventions:

    * ``state == 0``: the function at ``address`` takes ``nargs`` pointers (each tensor's
      ``data_ptr()``, in ``Kernel.args`` order), then ``nsizes`` ``int64_t`` sizes, and
      returns nothing; with ``error``, it returns an ``int64_t``, nonzero when it failed.
    * ``state != 0`` (a device kernel): ``int64_t f(void* state, void* stream, const
      intptr_t* args, int64_t n)``: ``state`` is yours (the kernel's handle, grid, ...; keep
      it alive as long as the launcher), ``stream`` the native handle of the current stream
      of the first tensor's device (NULL on the CPU), ``args`` the pointers then the sizes;
      nonzero when it failed.

    A state-convention function may return ``NativeEntry.NOT_NATIVE`` (-2) when it cannot
    launch now (not loaded yet, another context current): the runner then calls the
    :data:`KernelFn` itself, with the GIL, as the step interpreter does.

    When it failed, the runner raises ``error()`` (an exception instance, built with the
    GIL held), or a ``RuntimeError`` with the status without ``error``. The function must be
    safe to call without the GIL, and stay loaded while the process runs.
    """

    address: int
    nargs: int
    nsizes: int = 0
    error: Callable[[], BaseException] | None = None
    state: int = 0

    NOT_NATIVE: ClassVar[int] = -2
