"""The SDK's tools, beside the contract: what ``python -m sdk run`` and ``python -m sdk bench``
run (:mod:`sdk.cli` checks their options and calls them). Not part of the plugin API (a vendor
imports :mod:`sdk`); importable for scripts such as ``benchmarks/``.

- :mod:`sdk.tools.demo`: ``python -m sdk run``, a real model compiled and checked against eager.
- :mod:`sdk.tools.bench`: ``python -m sdk bench``, the kernel suite, and the method and timing
  helpers both suites share.
- :mod:`sdk.tools.bench_models`: ``python -m sdk bench --suite models``.
"""
