"""Warm starts launch cuda_triton's kernels from their records, not through Triton's JIT.

A cold process compiles a small GPT-2 training step and a split reduction (two kernels
launched from Python) with the whole-graph cache on; its kernels' first launches through
Triton store their records (plugins/cuda_triton/records.py). A warm process, in a fresh
interpreter over the same caches, rebuilds the programs from the graph cache and must load
every kernel's cubin through the driver (the shim's ``cuModuleLoadData``): the plugin's
explicit counter (``native.counts()``) says how many kernels were loaded from records and how
many times Triton's JIT path ran (a precompile, a first launch through ``kernel[grid]``): none.
Results match eager, and the warm process's bits are the cold one's. Records whose cubin the
driver refuses fall back to Triton (the counter says so; one warning per kernel), with the
same bits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import dataclasses, hashlib, json, sys
    import torch
    import sdk
    from sdk.core import pipeline
    from sdk.plugins.cuda_triton import native, records
    from tests import models

    mode, runner = sys.argv[1], sys.argv[2]
    if mode == "broken":  # every record's cubin damaged: the driver refuses it
        real = records.load

        def load(key, arch):
            rec = real(key, arch)
            return None if rec is None else dataclasses.replace(rec, cubin=b"\\0" * 512)

        records.load = load
    torch.use_deterministic_algorithms(True)
    model = models.gpt2(seed=0, n_embd=128, vocab_size=1024, n_positions=256, use_cache=False)
    model = model.to("cuda").train()
    ids = torch.randint(0, 1024, (4, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    x = torch.randn(1 << 22, device="cuda", generator=torch.Generator("cuda").manual_seed(1))

    def step(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach()

    def big_sum(x):  # a split reduction: two kernels, launched from Python
        return (x * x).sum()

    backend = sdk.backend("cuda_triton", runner=runner)
    reports = []
    token = pipeline.collect_reports(reports)
    loss = torch.compile(step, backend=backend)(ids)
    total = torch.compile(big_sum, backend=backend)(x)
    torch.cuda.synchronize()
    pipeline.stop_collecting(token)
    got = [loss, total, *(p.grad.clone() for p in model.parameters())]
    counts = native.counts()
    model.zero_grad(set_to_none=True)
    want = [step(ids), big_sum(x), *(p.grad for p in model.parameters())]
    errors = [
        float((a.double() - b.double()).abs().max() / (b.double().abs().max() + 1e-6))
        for a, b in zip(got, want)
    ]
    digest = hashlib.sha256(b"".join(t.cpu().numpy().tobytes() for t in got)).hexdigest()
    print("INFO " + json.dumps({
        "counts": counts,
        "cache": [r.cache for r in reports],
        "runners": [r.runner for r in reports],
        "errors": errors,
        "digest": digest,
    }))
    """
)


def _child(root: Path, mode: str, runner: str) -> dict:
    env = {
        **os.environ,
        "SDK_CACHE_DIR": str(root / "sdk"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "SDK_GRAPH_CACHE": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, runner],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("INFO "))
    return json.loads(line[5:])


@pytest.mark.parametrize("runner", ["native", "python"])
def test_a_warm_start_loads_every_kernel_from_its_record(tmp_path, runner):
    cold = _child(tmp_path, "cold", runner)
    # through Triton, or from the records the compile workers answered
    assert cold["counts"]["triton"] + cold["counts"]["record"] > 0, cold["counts"]
    assert max(cold["errors"]) < 1e-3, cold["errors"]
    warm = _child(tmp_path, "warm", runner)
    assert warm["cache"] and all(c == "hit" for c in warm["cache"]), warm["cache"]
    # every kernel from its record, none through Triton's JIT
    assert warm["counts"]["triton"] == 0, warm["counts"]
    assert warm["counts"]["record"] > 0, warm["counts"]
    assert max(warm["errors"]) < 1e-3, warm["errors"]
    assert warm["digest"] == cold["digest"]  # the same kernels: the same bits
    if runner == "native":  # (the split reduction's program may run in Python)
        assert "native" in warm["runners"], warm["runners"]


def test_records_the_driver_refuses_fall_back_to_triton(tmp_path):
    cold = _child(tmp_path, "cold", "native")
    broken = _child(tmp_path, "broken", "native")
    assert broken["counts"]["record"] == 0, broken["counts"]
    assert broken["counts"]["triton"] > 0, broken["counts"]
    assert max(broken["errors"]) < 1e-3, broken["errors"]
    assert broken["digest"] == cold["digest"]
