"""Build the executable program of one ATen graph variant.

Until the loop IR lands, every ATen call runs op by op through the fallback
and is recorded as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch.fx

from sdk.plugin import CompileContext
from sdk.report import ExternReport, FallbackReport, KernelReport

from . import fallback


@dataclass
class ProgramParts:
    kernels: list[KernelReport] = field(default_factory=list)
    externs: list[ExternReport] = field(default_factory=list)
    fallbacks: list[FallbackReport] = field(default_factory=list)
    views: int = 0


def build_program(session: Any, ctx: CompileContext, gm: torch.fx.GraphModule,
                  specs: tuple) -> tuple[Callable, ProgramParts]:
    fn, reports = fallback.whole_graph(gm, "no loop-IR lowering in this SDK version")
    return fn, ProgramParts(fallbacks=reports)
