"""The SDK core: capture, AOT, decompositions, loop IR, scheduling, runtime.

Nothing here is public API: vendors and the built-in plugins import :mod:`sdk`.
The core never names a device; plugins declare what they can do.
"""
