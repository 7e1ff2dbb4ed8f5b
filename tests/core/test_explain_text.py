"""What ``sdk.explain`` prints: each graph's ATen calls add up (in kernels, library calls,
fallbacks, and those with no code of their own), and a graph that runs no code does not
claim its calls run in generated kernels; no line over 160 characters (a kernel's ATen ops
counted past that), every detail with ``verbose=True``."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

import sdk
from sdk import cli
from tests import models

WIDTH = 160


def _sum(calls: sdk.CallCounts) -> int:
    return sum(getattr(calls, f.name) for f in dataclasses.fields(calls))


def _calls_line(graph: sdk.GraphReport) -> str:
    return next(ln for ln in str(graph).splitlines() if ln.startswith("  calls: "))


def test_each_graph_s_calls_add_up_and_a_graph_without_code_claims_no_kernel(seeded):
    cases = {
        "views only": (lambda x: x.t(), torch.randn(4, 6)),
        "an input returned": (lambda x: (x, (x * 2).sum()), torch.randn(4, 6)),
        "fused": (lambda x: (torch.sin(x) * 2).relu().sum(0), torch.randn(4, 6)),
        "a ReLU merged into its product": (
            models.mlp(8, 16, 4, act=torch.nn.ReLU, seed=0),
            torch.randn(3, 8),
        ),
    }
    graphs = {}
    with torch.no_grad():
        for name, (fn, x) in cases.items():
            (graphs[name],) = sdk.explain(fn, x).graphs
    for name, graph in graphs.items():
        calls = graph.calls
        assert _sum(calls) == graph.aten_ops, (name, calls, str(graph))
        line = _calls_line(graph)
        assert line.startswith(f"  calls: {calls.kernels} in "), (name, line)
        assert f"{calls.externs} extern" in line and f"{calls.fallbacks} fallback" in line, line

    views = graphs["views only"]
    assert views.aten_ops == 1 and views.calls == sdk.CallCounts(views=1), views.calls
    assert views.generated_fraction == 0.0
    line = _calls_line(views)
    assert "1 view (no code of its own)" in line and "no call runs code" in line, line
    assert "%" not in str(views) and "in generated kernels" not in str(views), str(views)

    returned = graphs["an input returned"]
    assert returned.calls == sdk.CallCounts(kernels=2), returned.calls
    assert "; 100% of those that run code in generated kernels" in _calls_line(returned)

    fused = graphs["fused"]
    assert fused.calls.kernels == fused.aten_ops == 4 and fused.generated_fraction == 1.0

    merged = graphs["a ReLU merged into its product"]
    # addmm + relu + addmm, the weights' transposes: the pass made one library call of the
    # first addmm and its ReLU, so no kernel runs; that ReLU has no code of its own
    assert merged.calls == sdk.CallCounts(externs=2, views=2, folded=1), str(merged)
    assert merged.generated_fraction == 0.0
    line = _calls_line(merged)
    assert "2 views and 1 size or merged call (no code of their own)" in line, line
    assert "; 0% of those that run code in generated kernels" in line, line


def test_size_arithmetic_is_counted_as_no_code(seeded):
    """A graph of symbolic sizes computes them (sym_size, products of sizes): calls of the
    graph that run no code."""

    def flat(x):
        return x.view(x.shape[0] * x.shape[1]) * 2  # a product of sizes, a view, a kernel

    (graph,) = sdk.explain(flat, torch.randn(4, 6), dynamic=True).graphs
    assert graph.sizes.startswith("symbolic"), graph.sizes
    assert graph.calls == sdk.CallCounts(kernels=1, views=1, folded=1), str(graph)
    assert graph.aten_ops == 3, str(graph)


def _whole(kernel: sdk.KernelReport) -> str:
    return f"  kernel {kernel.name}: {', '.join(kernel.ops)}"


def test_no_line_is_over_160_characters_and_verbose_prints_every_op(seeded):
    """A transformer block and a convnet, forward and backward: fused kernels of 10 to 23
    ATen ops printed 250 to 500 characters long."""
    cases = (
        (nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), (2, 6, 32)),
        (models.convnet(3, 8, 16, maxpool_after=(0,), seed=0), (2, 3, 16, 16)),
    )
    for model, shape in cases:
        x = torch.randn(shape)
        report = sdk.explain(model, x)
        lines = str(report).splitlines()
        assert max(map(len, lines)) <= WIDTH, [ln for ln in lines if len(ln) > WIDTH]
        long = [k for k in report.kernels if len(_whole(k)) > WIDTH]
        assert long, "the case needs kernels of long lists of ops"
        for graph in report.graphs:
            for k in graph.kernels:
                (line,) = (ln for ln in str(graph).splitlines() if f" kernel {k.name}: " in ln)
                if k in long:
                    assert line.startswith(f"  kernel {k.name}: {len(k.ops)} ops: {k.ops[0]}, ")
                    assert line.endswith(" more)"), line
                else:
                    assert line == _whole(k), line
        assert lines[-1] == "(lists shortened: sdk.explain(..., verbose=True) prints them whole)"

        verbose = sdk.explain(model, x, verbose=True)
        assert not verbose.compiled_now, verbose.compile_note
        full = str(verbose).splitlines()
        assert all(_whole(k) in full for k in verbose.kernels), str(verbose)
        assert any("relu_into_addmm: 0 rewrites" in ln for ln in full), str(verbose)
        whole = report.text(verbose=True).splitlines()  # the same report, printed whole
        assert all(_whole(k) in whole for k in long), whole


def test_the_command_line_takes_verbose(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wide_q.py").write_text(
        "import torch\n"
        "def f():\n"
        "    return (lambda x: ((x.sin() * 2).cos() + 1).tanh().exp().log1p().sigmoid()\n"
        "            .neg().abs().sqrt().relu().sum()), (torch.randn(4, 8),)\n"
    )
    for flags in ([], ["--verbose"]):
        assert cli.main(["explain", "wide_q.py:f", "--inference", *flags]) == 0
        out = capsys.readouterr().out
        (kernel,) = (ln for ln in out.splitlines() if ln.startswith("  kernel "))
        if flags:
            assert len(kernel) > WIDTH and "more)" not in kernel, kernel
        else:
            assert max(map(len, out.splitlines())) <= WIDTH and kernel.endswith(" more)"), out
