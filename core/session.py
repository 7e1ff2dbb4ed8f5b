"""What the stages of a compile need of its session, as a typed Protocol.

:class:`core.pipeline.Session` is the one implementation: the plugin, its parsed options, its
hook callers and decomposition tables, and the chain's peer sessions. The stages
(``core/stages``), the chain, the program builder, the warm start and the op list take a
:class:`CompileSession`, so that none of them imports the pipeline (which imports them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch.fx

    from sdk.plugin import CompileContext, CoreOptions, PluginInfo, PluginKind, PluginOptions
    from sdk.report import GraphBreak, GraphReport

    from .registry import Registry
    from .stages.capture import Capture


class Hooks(Protocol):
    """Hook callers that reach the session's plugin only (``hooks.sdk_render_kernel(...)``)."""

    def __getattr__(self, hook: str) -> Callable[..., Any]: ...

    def implements(self, hook: str) -> bool: ...


class CompileSession(Protocol):
    """One Dynamo graph's compile by one plugin (see :class:`core.pipeline.Session`)."""

    registry: Registry
    info: PluginInfo
    mode: str | None
    options: CoreOptions
    plugin_options: PluginOptions
    explicit_wrappers: bool
    hooks: Hooks
    #: why the plugin cannot compile this Dynamo graph at all (a preparation hook raised)
    broken: str | None
    #: why the plugin cannot compile on this machine (None: it can); it runs what the caches
    #: hold, and a graph or partition that needs a compile goes to the chain or ATen
    cannot_compile: str | None
    #: the ops the plugin keeps whole (and those their derivatives call)
    kept: frozenset[Any]
    #: the explain() collectors every GraphReport of this compile lands in
    sinks: tuple[list[GraphReport], ...]
    graph_break: GraphBreak | None

    @property
    def debug(self) -> bool: ...

    def kind_of(self, plugin: str) -> PluginKind: ...

    def peer(self, plugin: str) -> CompileSession: ...

    def narrowed(self, chain: tuple[str, ...]) -> CompileSession: ...

    def context(self, kind: str, name: str, device_type: str) -> CompileContext: ...

    def decompositions(self, ctx: CompileContext) -> dict[Any, Callable]: ...

    def own_table(self, ctx: CompileContext) -> dict[Any, Callable]: ...

    def table(self, ctx: CompileContext) -> dict[Any, Callable]: ...

    def decomposes(self, ctx: CompileContext) -> set[Any]: ...

    def compile_aten_graph(
        self, ctx: CompileContext, gm: torch.fx.GraphModule, example_inputs: list[Any], **kw: Any
    ) -> Callable: ...

    def restore_aten_graph(
        self, state: dict[str, Any], graph: Callable, *, capture: Capture
    ) -> Callable: ...
