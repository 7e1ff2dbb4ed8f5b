"""The public value types a plugin exchanges with the core.

Everything here is plain data: frozen dataclasses and enums. A plugin builds a
:class:`PluginInfo` once, answers support and fusion questions with
:class:`Support` / :class:`Verdict`, and receives a :class:`CompileContext` in
every hook that concerns one compile.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Version of the hook API described in :mod:`sdk.hookspecs`. A plugin states
#: the version it was written for in :attr:`PluginInfo.hook_api`; the core
#: accepts plugins whose version lies in :data:`SUPPORTED_HOOK_APIS`.
HOOK_API_VERSION = 4  # 2: sdk_cache_key; 3: graph-level plugins (sdk_claim_nodes...); 4: sdk_extern
SUPPORTED_HOOK_APIS = range(1, HOOK_API_VERSION + 1)


class PluginKind(str, enum.Enum):
    """What a plugin does in a compile."""

    CODEGEN = "codegen"  # lowers, fuses and renders kernels: becomes `sdk:<name>`
    WRAPPER = "wrapper"  # wraps a compiled graph made by a codegen plugin
    GRAPH = "graph"  # compiles whole subgraphs with its own compiler: becomes `sdk:<name>`


class Capability(str, enum.Enum):
    """Capabilities a plugin declares; the core asks these, never the device name."""

    FP64 = "fp64"  # kernels may compute in float64
    BF16 = "bf16"  # bf16/fp16 loads and stores (compute may be fp32)
    REDUCTIONS = "reductions"  # can render reduction stages
    MULTI_STAGE = "multi_stage"  # a kernel may hold several reduction stages per row
    INDIRECT_LOADS = "indirect_loads"  # loads through a computed index (gather, embedding)
    RANDOM = "random"  # renders the counter-based RNG ops
    # wrapper: replays whole graphs (CUDA graphs); mode="reduce-overhead" (and
    # "max-autotune") applies every available wrapper that declares it
    GRAPH_CAPTURE = "graph_capture"
    # a later stage of a kernel may load, at the same outer point, what an earlier one
    # stored there (one thread runs a row's stages in order: true in C++, not in Triton)
    STORE_THEN_LOAD = "store_then_load"
    # the device's library convolutions are faster on channels-last activations: the core
    # picks that layout once per graph (inference graphs with convolutions, by Inductor's
    # FLOP-weighted rule) and converts only at the graph's edges
    CHANNELS_LAST = "channels_last"
    # a convolution's bias is added in the generated kernel that follows the library call
    # (with BatchNorm, activation and residual), not by the library call itself
    CONV_BIAS_IN_KERNEL = "conv_bias_in_kernel"
    # transcendental functions (sin, exp, erf, ...) cost about as much as a load (a GPU's
    # special-function units): the core may recompute a value that uses them at every
    # point of a larger reader that broadcasts it. Without it that value is stored once
    # (the rotary embedding's cos/sin, read over every head)
    CHEAP_TRANSCENDENTALS = "cheap_transcendentals"
    # kernels whose sizes are symbolic (``sdk.ir.size_var``): the renderer takes each of a
    # kernel's ``size_args`` as an integer argument after the buffers, so one compiled
    # program serves every size of a dynamic dimension. Without it the core compiles a
    # variant per concrete shape
    SYMBOLIC_SIZES = "symbolic_sizes"


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


@dataclass(frozen=True)
class PluginInfo:
    """A plugin's identity, returned by ``sdk_plugin_info``."""

    name: str
    version: str
    hook_api: int
    device_types: tuple[str, ...]
    kind: PluginKind = PluginKind.CODEGEN
    capabilities: frozenset[Capability] = frozenset()
    options: Mapping[str, OptionSpec] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"plugin name {self.name!r} must be a Python identifier")
        object.__setattr__(self, "kind", PluginKind(self.kind))
        object.__setattr__(
            self, "capabilities", frozenset(Capability(c) for c in self.capabilities)
        )
        object.__setattr__(self, "device_types", tuple(self.device_types))


@dataclass(frozen=True)
class Support:
    """Answer of ``sdk_op_support``: may this op go into a generated kernel?"""

    ok: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> Support:
        return cls(True)

    @classmethod
    def no(cls, reason: str) -> Support:
        if not reason:
            raise ValueError("a refusal needs a reason")
        return cls(False, reason)


def environment_variable(name: str) -> str | None:
    """The environment variable ``name`` now, or None when unset: a plugin's own switches
    (``TRITON_INTERPRET``, a compiler path) read through the SDK's one reader of the
    environment, ``sdk.core.config``."""
    from sdk.core import config

    return config.variable(name)


#: Answer of ``sdk_can_fuse``; same shape as :class:`Support`.
Verdict = Support


@dataclass(frozen=True)
class CompileContext:
    """What a hook may know about the compile it is called for."""

    plugin: str  # the codegen plugin doing this compile
    device_type: str  # device of the graph's tensors
    graph_kind: str  # "forward", "backward" or "inference"
    graph_name: str
    options: Mapping[str, Any]
    capabilities: frozenset[Capability]
    #: what :meth:`note` recorded; ``sdk.explain`` shows it under the graph
    notes: list[str] = field(default_factory=list, compare=False, repr=False)

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


#: A compiled kernel: called with the kernel's buffers (tensors), in the order
#: of ``Kernel.args``, and returns nothing.
KernelFn = Callable[..., None]


@dataclass(frozen=True)
class CompiledSubgraph:
    """One partition compiled by a graph-level plugin: what ``sdk_compile_subgraph`` returns.

    ``fn`` takes the partition's inputs positionally (real tensors and ints) and returns a
    tuple or list of outputs in the order of the partition's output node. ``artifact`` is
    the serialized form stored in the whole-graph cache (for example a ``.vmfb``), rebuilt
    by ``sdk_load_subgraph`` in a later process; None keeps the partition out of the cache.
    The artifact's cache key is the core's (the partition's graph, input layouts, options,
    plugin version) plus what the plugin's ``sdk_cache_key`` returns (compiler version and
    flags, CPU features): a plugin that does not answer ``sdk_cache_key`` is not cached.
    """

    fn: Callable[..., Any]
    artifact: bytes | None = None
