"""``torch.compile(backend="sdk:iree_cpu")``, alone and chained with cpu_cpp, against eager.

Training steps (forward, loss and every gradient) and inference on fresh random inputs, judged
by Dynamo's accuracy rule for models: the compiled result's RMSE against an fp64 eager
reference is at most twice eager fp32's, plus 1e-4. Where each op went is read from the
compile's reports (what ``sdk.explain`` prints: the partition report).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch

pytest.importorskip(
    "iree_sdk_plugin",
    reason="the IREE plugin wheel is not installed: pip install ./examples/iree_vendor",
)

import sdk
from tests import models

BACKENDS = {
    "iree_cpu": sdk.backend("iree_cpu"),
    "iree_cpu+cpu_cpp": sdk.backend("iree_cpu", chain=["cpu_cpp"]),
}


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).pow(2).mean().sqrt())


def _results(model: torch.nn.Module, step: Callable, *args) -> list[torch.Tensor]:
    """Loss (or output) and every parameter's gradient of one step."""
    model.zero_grad(set_to_none=True)
    out = step(*args)
    if not out.requires_grad:
        return [out.detach()]
    out.sum().backward() if out.dim() else out.backward()
    return [out.detach()] + [p.grad.detach().clone() for p in model.parameters()]


def check_like_dynamo(
    model: torch.nn.Module, fn: Callable, backend, *args, reports: list
) -> sdk.ExplainReport:
    """Compiled vs eager fp32 vs eager fp64: Dynamo's RMSE rule on each result. Returns the
    compile's reports (``reports``: the test's ``graph_reports``), what ``sdk.explain`` would
    give without compiling the model a second time."""
    import copy

    ref64 = copy.deepcopy(model).double()
    args64 = [a.double() if a.is_floating_point() else a for a in args]
    compiled = torch.compile(lambda *a: fn(model, *a), backend=backend)
    got = _results(model, compiled, *args)
    report = sdk.ExplainReport(graphs=list(reports))
    eager = _results(model, lambda *a: fn(model, *a), *args)
    want = _results(ref64, lambda *a: fn(ref64, *a), *args64)
    for i, (g, e, r) in enumerate(zip(got, eager, want, strict=True)):
        assert torch.isfinite(g).all(), f"result {i}: non-finite"
        assert rmse(g, r) <= 2 * rmse(e, r) + 1e-4, f"result {i}: {rmse(g, r)} vs {rmse(e, r)}"
    return report


def loss_of(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def _iree_did_most(report: sdk.ExplainReport) -> None:
    split = [g for g in report.graphs if g.partitions]
    assert split, str(report)
    for graph in split:
        iree = sum(len(p.nodes) for p in graph.partitions if p.compiled_by == "iree_cpu")
        assert iree >= graph.aten_ops / 2, str(graph)


def test_mlp_training_step(graph_reports):
    """IREE takes all of it (with a chain, cpu_cpp would get nothing: the convnet and GPT-2
    cases cover the chain)."""
    torch.manual_seed(0)
    model = models.mlp(32, 64, 8, layernorm=True)
    report = check_like_dynamo(
        model,
        loss_of,
        BACKENDS["iree_cpu"],
        torch.randn(16, 32),
        torch.randint(0, 8, (16,)),
        reports=graph_reports,
    )
    assert {g.kind for g in report.graphs if g.partitions} == {"forward", "backward"}
    _iree_did_most(report)


@pytest.mark.parametrize("backend", BACKENDS)
def test_convnet_training_step(backend, graph_reports):
    torch.manual_seed(0)
    model = models.convnet(3, 8, 16, batchnorm=(True, False), maxpool_after=(0,))
    report = check_like_dynamo(
        model,
        loss_of,
        BACKENDS[backend],
        torch.randn(4, 3, 16, 16),
        torch.randint(0, 10, (4,)),
        reports=graph_reports,
    )
    _iree_did_most(report)
    if backend == "iree_cpu+cpu_cpp":  # what IREE refuses goes to cpu_cpp, not ATen
        assert not report.fallbacks, str(report)


def test_inference(graph_reports):
    torch.manual_seed(0)
    model = models.convnet(3, 8, 16, batchnorm=(True, False), maxpool_after=(0,)).eval()
    with torch.no_grad():
        report = check_like_dynamo(
            model,
            lambda m, x: m(x),
            BACKENDS["iree_cpu+cpu_cpp"],
            torch.randn(2, 3, 16, 16),
            reports=graph_reports,
        )
    assert [g.kind for g in report.graphs if g.partitions] == ["inference"], str(report)


def test_refusals_carry_iree_s_reason():
    """IREE's torch input path has no lowering for CPU flash attention's backward: it goes
    to cpu_cpp with IREE's diagnostic as the reason; the ops around it stay IREE's."""

    def attention(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).sin()

    q, k, v = (torch.randn(1, 2, 8, 16, requires_grad=True) for _ in range(3))
    report = sdk.explain(attention, q, k, v, backend=BACKENDS["iree_cpu+cpu_cpp"])
    backward = next(g for g in report.graphs if g.kind == "backward" and g.placements)
    placed = {p.op: p for p in backward.placements}
    sdpa = next(p for op, p in placed.items() if "scaled_dot_product" in op)
    assert sdpa.plugin == "cpu_cpp", str(report)
    assert "IREE's torch input path does not lower it" in sdpa.refusals[0][1], str(report)
    assert placed["aten.cos.default"].plugin == "iree_cpu", str(report)
    got = torch.compile(attention, backend=BACKENDS["iree_cpu+cpu_cpp"])(q, k, v)
    got.sum().backward()
    grads = [t.grad for t in (q, k, v)]
    ref_in = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref = attention(*ref_in)
    ref.sum().backward()
    torch.testing.assert_close(got, ref, rtol=1.3e-5, atol=1e-5)
    for g, r in zip(grads, ref_in, strict=True):
        torch.testing.assert_close(g, r.grad, rtol=1.3e-5, atol=1e-5)


def test_dynamic_batch():
    torch.manual_seed(0)
    model = models.mlp(32, 64, 8, layernorm=True)
    compiled = torch.compile(model, backend=BACKENDS["iree_cpu"], dynamic=True)
    with torch.no_grad():
        for rows in (3, 8, 17):
            x = torch.randn(rows, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1.3e-5, atol=1e-5)


@pytest.mark.slow
def test_gpt2_two_layers_training_step(graph_reports):
    pytest.importorskip("transformers")
    model = models.gpt2(seed=0, bos_token_id=0, eos_token_id=0)
    ids = torch.randint(0, 512, (2, 32))
    report = check_like_dynamo(
        model,
        lambda m, i: m(i, labels=i).loss,
        BACKENDS["iree_cpu+cpu_cpp"],
        ids,
        reports=graph_reports,
    )
    _iree_did_most(report)
    assert not report.fallbacks, str(report)


WARM = """
import time, torch, sdk
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(5, 8)
with torch.no_grad():  # one graph (inference) is enough to see the cache at work
    report = sdk.explain(model, x, backend=sdk.backend("iree_cpu"))
print(sorted({p.cache for g in report.graphs for p in g.partitions}))
"""


def test_a_second_process_loads_the_artifacts_from_the_cache(tmp_path):
    env = {**os.environ, "SDK_CACHE_DIR": str(tmp_path / "cache"), "SDK_GRAPH_CACHE": "1"}
    runs = [
        subprocess.run(
            [sys.executable, "-c", textwrap.dedent(WARM)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    assert runs[0].stdout.strip().splitlines()[-1] == "['stored']", runs[0].stdout
    assert runs[1].stdout.strip().splitlines()[-1] == "['hit']", runs[1].stdout
    assert "leaked" not in runs[1].stderr, runs[1].stderr[-2000:]


def test_cli_explain_shows_the_partitions():
    run = subprocess.run(
        [
            *(sys.executable, "-m", "sdk", "explain", "--inference"),
            *("--plugin", "iree_cpu", "--chain", "cpu_cpp"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "split by the chain of sdk:iree_cpu" in run.stdout, run.stdout
    assert "partition part0_0 (iree_cpu)" in run.stdout, run.stdout
