"""Moved to :mod:`sdk.ir.kernel`: the contract package defines the IR types and the core
depends on them (issue 38). This path stays importable and is the same module object, so
``sdk.core.ir.kernel is sdk.ir.kernel`` (a monkeypatch of either patches both)."""

import sys

from sdk.ir import kernel

sys.modules[__name__] = kernel
