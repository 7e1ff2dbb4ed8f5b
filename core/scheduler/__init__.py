"""The fusion scheduler: which lowered nodes share a kernel.

Every computed node starts as a group of its own. A group has an outer
iteration space ``X`` (the parallel loops) and, if it reduces, an inner space
``R``; size-1 dimensions are dropped from both. A node fits a group when it is
a reduction over ``(X, R)``, or pointwise over ``X`` (runs once per outer
point) or over ``X + R`` (runs inside the inner loop).

Candidates are pairs of groups that are connected (the second reads the
first: vertical fusion, which covers pointwise chains and reductions with
their prologue and epilogue) or read a common buffer (horizontal fusion of
siblings). Each is ranked by the bytes of memory traffic it saves, checked by
the core (compatible spaces, no cycle through a third group, every read of a
reduction result at the reader's own outer point, the plugin's capabilities)
and then put to the plugin's ``sdk_can_fuse`` veto. The best legal candidate
is merged and the search repeats. Ties break on graph order: deterministic.

Inside a group, pointwise nodes are inlined into their readers (recomputed,
never stored unless something outside the group or the graph's output needs
them) and reduction results become ``LocalRef`` s of later stages.

The package: :mod:`.groups` (groups and how a node fits their loops), :mod:`.inline`
(producers recomputed in their readers before fusion), :mod:`.fusion` (the search,
:class:`Scheduler`) and :mod:`.builder` (a group -> a kernel). This module exports what the
rest of the tree uses (the old module's ``__all__``, and what core/program.py and the tests
import).
"""

from __future__ import annotations

from ..ir.kernel import FusionGroup
from .builder import _Builder, _loop_order, kernel_name
from .fusion import Scheduler
from .groups import Decision, Group

__all__ = [
    "Decision",
    "FusionGroup",
    "Group",
    "Scheduler",
    "_Builder",
    "_loop_order",
    "kernel_name",
]
