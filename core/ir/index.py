"""Moved to :mod:`sdk.ir.index`: the contract package defines the IR types and the core
depends on them (issue 38). This path stays importable and is the same module object, so
``sdk.core.ir.index is sdk.ir.index`` (a monkeypatch of either patches both)."""

import sys

from sdk.ir import index

sys.modules[__name__] = index
