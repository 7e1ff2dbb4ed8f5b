"""The values a graph-level plugin (``PluginKind.GRAPH``) exchanges with the core:
:class:`CompiledSubgraph` (what ``sdk_compile_subgraph`` returns: the partition's callable,
its artifact, its output buffers) and :class:`ClaimGroups` (the plugin's own partitions, an
answer of ``sdk_claim_nodes``), and :class:`Support`, a plugin's answer for one op or node
(of any plugin: ``sdk_op_support`` too), defined here because ``ClaimGroups`` holds some. All
three are also names of :mod:`sdk.plugin` and of ``sdk``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Support:
    """Answer of ``sdk_op_support`` (and of ``sdk_claim_nodes``, per node or per group): may this op go
    into a generated kernel (or this plugin's partition)? ``Support.yes()``, or
    ``Support.no(reason)``: the reason is what ``sdk.explain`` shows for the op."""

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
    #: hook API 7: ``fn`` writes its outputs into buffers the core allocates, one per output
    #: of the partition, each ``torch.empty_strided`` with the sizes, strides, dtype and device
    #: of the output node's ``meta["val"]`` (on the plugin's device). It is called as
    #: ``fn(*inputs, *outputs)`` and returns nothing (what it returns is ignored); the core
    #: returns the buffers. False: ``fn(*inputs)`` returns the outputs, which must have the
    #: sizes, dtype and device of ``meta["val"]`` (strides may differ; the core does not copy)
    preallocated_outputs: bool = False
    #: hook API 7, with ``preallocated_outputs``: ``{output index: input index}``, outputs
    #: written into an input's buffer (donation, as PJRT's and ORT's input-output aliasing):
    #: where the core can prove that input is dead after the partition (an intermediate of the
    #: outer graph that only this partition reads, of the output's layout), it passes the input
    #: tensor itself as that output's buffer; elsewhere it allocates a buffer as for any other
    #: output (the report's note says which). The plugin must give the same answer for the
    #: same graph (it is stored with the artifact)
    aliases: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"CompiledSubgraph.fn must be callable, got a {type(self.fn).__name__}")
        aliases = dict(self.aliases)
        for out, inp in aliases.items():
            if not (isinstance(out, int) and isinstance(inp, int) and out >= 0 and inp >= 0):
                raise ValueError(
                    f"CompiledSubgraph.aliases maps output index to input index (ints >= 0), "
                    f"got {out!r}: {inp!r}"
                )
        if aliases and not self.preallocated_outputs:
            raise ValueError(
                "CompiledSubgraph.aliases needs preallocated_outputs=True (an aliased output "
                "is written into the input's buffer the core passes)"
            )
        if len(set(aliases.values())) != len(aliases):
            raise ValueError(f"CompiledSubgraph.aliases gives one input to two outputs: {aliases}")
        object.__setattr__(self, "aliases", aliases)


@dataclass(frozen=True)
class ClaimGroups:
    """A graph-level plugin's own partitions: what ``sdk_claim_nodes`` may answer instead of a
    per-node mapping (hook API 7), as ORT's execution providers return their subgraphs.

    ``groups``: each a collection of call nodes of the graph the plugin wants compiled
    together, in one ``sdk_compile_subgraph`` call. The core keeps each group as one partition
    unless contracting it would form a cycle through nodes outside it (a path leaving the
    group and coming back): then it cuts the group into the largest acyclic pieces (torch's
    partitioner), with the reason in ``sdk.explain``. A group (or piece) of fewer than
    ``min_size`` call nodes is not compiled by this plugin: its nodes go to the next plugin
    of the chain, else ATen, with the reason. A node in two groups stays in the first.

    ``refused``: ``{node: Support.no(reason)}`` for nodes the plugin refuses with a reason;
    a call node in no group and not here is refused as "not claimed".
    """

    groups: tuple[tuple[Any, ...], ...]
    min_size: int = 1
    refused: Mapping[Any, Support] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(tuple(g) for g in self.groups))
        if isinstance(self.min_size, bool) or not isinstance(self.min_size, int):
            raise TypeError(f"ClaimGroups.min_size must be an int, got {self.min_size!r}")
        if self.min_size < 1:
            raise ValueError(f"ClaimGroups.min_size must be at least 1, got {self.min_size}")
