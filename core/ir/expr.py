"""Moved to :mod:`sdk.ir.expr`: the contract package defines the IR types and the core
depends on them (issue 38). This path stays importable and is the same module object, so
``sdk.core.ir.expr is sdk.ir.expr`` (a monkeypatch of either patches both)."""

import sys

from sdk.ir import expr

sys.modules[__name__] = expr
