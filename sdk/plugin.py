"""The public value types a plugin exchanges with the core, and a plugin's identity.

Everything here is plain data: frozen dataclasses and enums. A plugin builds a
:class:`PluginInfo` once, answers support and fusion questions with :class:`Support`
(``Support.yes()``, ``Support.no(reason)``), states what it prefers with
:class:`Preferences`, names its own rewrites of the ATen graph with
:class:`GraphPass`, and receives a :class:`CompileContext` in every hook that concerns one
compile.

This module defines the plugin's identity (:class:`PluginInfo`, :class:`PluginKind`, the
hook-API version, :class:`CompileUnavailable`) and imports the rest from the modules that
define them, so that every name stays importable from here (and from ``sdk``):

* :mod:`sdk.capabilities`: :class:`Capability`, :class:`RetiredCapability`,
  :class:`Preferences`, :func:`retired_fix`;
* :mod:`sdk.options`: :class:`OptionSpec`, :class:`CoreOptions`, :class:`PluginOptions`,
  :data:`RESERVED_OPTION_NAMES`;
* :mod:`sdk.context`: :class:`CompileContext`, :class:`KernelLimits`, :class:`GraphPass`;
* :mod:`sdk.kernels`: :class:`KernelSource`, :class:`KernelVariant`, :class:`KernelChoices`,
  :data:`KernelFn`, :class:`NativeEntry`;
* :mod:`sdk.subgraph`: :class:`Support`, :class:`ClaimGroups`, :class:`CompiledSubgraph`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sdk import _config
from sdk.capabilities import (  # noqa: F401  (re-exported: sdk.plugin.Capability, ...)
    _RETIRED_BY_VALUE,
    Capability,
    Preferences,
    RetiredCapability,
    retired_fix,
)
from sdk.context import (  # noqa: F401  (re-exported)
    CompileContext,
    GraphPass,
    KernelLimits,
)
from sdk.kernels import (  # noqa: F401  (re-exported)
    KernelChoices,
    KernelFn,
    KernelSource,
    KernelVariant,
    NativeEntry,
)
from sdk.options import (  # noqa: F401  (re-exported)
    RESERVED_OPTION_NAMES,
    CoreOptions,
    OptionSpec,
    PluginOptions,
    specs_of,
)
from sdk.subgraph import (  # noqa: F401  (graph-level values; Support: a plugin's answer)
    ClaimGroups,
    CompiledSubgraph,
    Support,
)

#: Version of the hook API described in :mod:`sdk.hookspecs`. A plugin states
#: the version it was written for in :attr:`PluginInfo.hook_api`; the core
#: accepts plugins whose version lies in :data:`SUPPORTED_HOOK_APIS`.
HOOK_API_VERSION = 8  # 2: sdk_cache_key; 3: graph-level plugins (sdk_claim_nodes...);
# 4: sdk_kernel_limits, sdk_can_fuse's ``merged``, sdk_extern; 5: sdk_graph_passes, GraphPass;
# 6: sdk_preferences and Preferences, Capability's preferences and dead members retired,
# the alias Verdict gone; sdk_kernel_choices, KernelChoices, KernelVariant (measured kernel
# choices); 7: graph-level contract: sdk_claim_nodes may answer ClaimGroups (the plugin's own
# partitions, with a minimum size), PluginInfo.frozen_parameters (parameters as constants of
# inference partitions), CompiledSubgraph.preallocated_outputs and .aliases (output buffers);
# 8: KernelSource.requires (the sizes a kernel of symbolic sizes is right for)
SUPPORTED_HOOK_APIS = range(1, HOOK_API_VERSION + 1)


class PluginKind(str, enum.Enum):
    """What a plugin does in a compile."""

    CODEGEN = "codegen"  # lowers, fuses and renders kernels: becomes `sdk:<name>`
    WRAPPER = "wrapper"  # wraps a compiled graph made by a codegen plugin
    GRAPH = "graph"  # compiles whole subgraphs with its own compiler: becomes `sdk:<name>`


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
