"""What passes between the stages of a compile (see :mod:`core.stages`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch.fx

    from sdk.plugin import CompileContext
    from sdk.report import GraphReport

    from ..warm import Recipe
    from .capture import Capture


@dataclass(frozen=True)
class Job:
    """One ATen graph to compile: the input of the partition and build stages.

    ``whole``: a partition of a chain's split, compiled whole by one plugin and not wrapped
    (its inputs are not Dynamo's: no guard of Dynamo checks them). ``recipe`` is filled with
    what a later process needs to restore the result (:mod:`core.warm`)."""

    ctx: CompileContext
    gm: torch.fx.GraphModule
    example_inputs: list[Any]
    recipe: Recipe
    whole: bool = False
    #: inference graphs of a plugin asking for frozen parameters (``PluginInfo.frozen_parameters``):
    #: the graph inputs that are the model's parameters and buffers (not written by the
    #: graph), ``{input index: tensor}``
    parameters: Mapping[int, Any] = field(default_factory=dict)
    #: the Dynamo graph this ATen graph came from (None: a chain's partition)
    capture: Capture | None = None
    #: the ATen calls of ``gm`` (views included), counted where the job was made with its
    #: other facts (``ctx.written_inputs``); None: not counted
    aten_ops: int | None = None


@dataclass(frozen=True)
class Built:
    """A compiled graph before the wrap stage: the program, its report and what wrapping it
    needs. ``gm`` may be a function that returns the graph (read only for a fallback)."""

    ctx: CompileContext
    gm: Any
    program: Callable
    report: GraphReport
    start: float  # when its compile began (GraphReport.compile_seconds)
    wrap: bool = True
    recipe: Recipe | None = None
    #: the Dynamo graph it came from (None: a chain's partition)
    capture: Capture | None = None
