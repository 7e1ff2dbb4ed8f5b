"""Moved to :mod:`sdk.ir.symbols`: the contract package defines the IR types and the core
depends on them (issue 38). This path stays importable and is the same module object, so
``sdk.core.ir.symbols is sdk.ir.symbols`` (a monkeypatch of either patches both)."""

import sys

from sdk.ir import symbols

sys.modules[__name__] = symbols
