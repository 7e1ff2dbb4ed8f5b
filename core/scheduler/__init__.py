"""The fusion scheduler (:mod:`.fusion`); this package exports what the rest of the core uses."""

from __future__ import annotations

from .fusion import (
    Decision,
    FusionGroup,
    Group,
    Scheduler,
    _Builder,
    _loop_order,
    inline_producers,
    kernel_name,
    kernel_size_args,
)

__all__ = [
    "Decision",
    "FusionGroup",
    "Group",
    "Scheduler",
    "_Builder",
    "_loop_order",
    "inline_producers",
    "kernel_name",
    "kernel_size_args",
]
