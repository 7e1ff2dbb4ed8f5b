"""The loop IR's old home: its modules are defined in :mod:`sdk.ir` (expr, symbols, index,
kernel, graph) and each ``sdk.core.ir.<module>`` is that same module."""
