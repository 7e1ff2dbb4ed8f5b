"""Moved to :mod:`sdk.ir.graph`: the contract package defines the IR types and the core
depends on them (issue 38). This path stays importable and is the same module object, so
``sdk.core.ir.graph is sdk.ir.graph`` (a monkeypatch of either patches both)."""

import sys

from sdk.ir import graph

sys.modules[__name__] = graph
