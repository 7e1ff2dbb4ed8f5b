"""The SDK's tools, beside the contract: what ``python -m sdk run`` and ``python -m sdk bench``
run (:mod:`sdk.cli` checks their options and calls them). Not part of the plugin API (a vendor
imports :mod:`sdk`); importable for scripts such as ``benchmarks/``.

- :mod:`sdk.tools.demo`: ``python -m sdk run``, a real model compiled and checked against eager.
- :mod:`sdk.tools.bench`: ``python -m sdk bench``, the kernel suite's entry point and the method
  both suites follow; :mod:`sdk.tools.bench_kernels`, its workloads.
- What both suites share: :mod:`sdk.tools.bench_timing` (one workload compiled, checked and
  timed), :mod:`sdk.tools.bench_check` (the comparisons with eager) and
  :mod:`sdk.tools.bench_report` (setup, header, tables, JSON).
- :mod:`sdk.tools.bench_models`: ``python -m sdk bench --suite models``, its rows;
  :mod:`sdk.tools.bench_model_cases` (how each model is built; the HF transformers rows in
  :mod:`sdk.tools.bench_hf_cases`), :mod:`sdk.tools.bench_launches`
  (CUDA launches per step) and :mod:`sdk.tools.bench_models_report` (its table and JSON).
"""
