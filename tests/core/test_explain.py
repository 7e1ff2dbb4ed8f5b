"""``sdk.explain`` on what was already compiled: the graphs that run for the inputs, reported
without a new Dynamo compile (or the reason it must compile); each graph break with Dynamo's
own reason; the records freed with Dynamo's compiled graphs."""

from __future__ import annotations

import gc
import logging
import weakref

import pytest
import torch
from torch import nn

import sdk
from sdk.core.adapters import torch_private as tp
from tests import models

BACKEND = "sdk:cpu_cpp"


class Block(nn.Module):  # a module of the user's own (Dynamo starts at its forward)
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.fc(x)) * 2


def pointwise(x, y):
    return (torch.sin(x) * y + torch.cos(y)).relu()


def with_breaks(x):
    y = torch.cos(x) + 1
    print("between the graphs")  # a graph break: Dynamo does not trace print
    if y.sum().item() > 0:  # and another: a Python branch on a tensor's value
        return torch.sin(y)
    return torch.cos(y) - 1


def test_explain_of_an_already_compiled_model_compiles_nothing(seeded, graph_reports):
    for model, x in (
        (models.mlp(16, 32, 4, layernorm=True), torch.randn(8, 16)),
        (Block(), torch.randn(3, 8)),
    ):
        compiled = torch.compile(model, backend=BACKEND)
        compiled(x).sum().backward()
        compiled_then = list(graph_reports)
        graphs = tp.dynamo_graph_count()
        for target in (compiled, model):  # what torch.compile returned, and the model itself
            report = sdk.explain(target, x)
            assert tp.dynamo_graph_count() == graphs, report.compile_note
            assert report.dynamo_compiles == 0 and not report.compiled_now, str(report)
            assert report.compile_note.startswith("no new compile"), report.compile_note
            # the reports are those of the compile: the same graphs, their compile times
            assert [id(g) for g in report.graphs] == [id(g) for g in compiled_then]
            assert sorted(g.kind for g in report.graphs) == ["backward", "forward"]
        compiled(x)  # the user's compiled model still has its graphs: nothing was reset
        assert tp.dynamo_graph_count() == graphs
        graph_reports.clear()


def test_explain_of_a_compiled_function_finds_the_options_it_was_compiled_with(seeded):
    x, y = torch.randn(6, 9), torch.randn(6, 9)
    compiled = torch.compile(pointwise, backend=BACKEND, options={"fusion": False})
    compiled(x, y)
    graphs = tp.dynamo_graph_count()
    reports = [
        sdk.explain(compiled, x, y),
        sdk.explain(pointwise, x, y),
        sdk.explain(pointwise, x, y, fusion=False),  # asked for, and what it was compiled with
        sdk.explain(pointwise, x, y, backend=sdk.backend("cpu_cpp", fusion=False)),
    ]
    assert tp.dynamo_graph_count() == graphs
    for report in reports:
        assert not report.compiled_now, report.compile_note
        assert len(report.kernels) > 1, str(report)  # unfused: a kernel per op
        assert [g.name for g in report.graphs] == [g.name for g in reports[0].graphs]


def test_explain_takes_the_mode_and_the_compiled_object_s_own(seeded):
    """``mode=`` is torch.compile's mode, not an unknown option; what torch.compile returned
    is explained with the backend, mode and options it was made with, also where ``backend``
    names the same plugin (a max-autotune compile was compiled a second time, the report
    naming the mode's wrappers by an enum's repr)."""
    x = torch.randn(4, 8)
    fresh = sdk.explain(torch.compile(pointwise, backend=BACKEND, options={"fusion": False}), x, x)
    assert fresh.compiled_now and len(fresh.kernels) > 1, str(fresh)  # its options: unfused

    compiled = torch.compile(pointwise, backend=BACKEND, mode="max-autotune")
    compiled(x, x)
    graphs = tp.dynamo_graph_count()
    for report in (
        sdk.explain(compiled, x, x),
        sdk.explain(compiled, x, x, backend=BACKEND),
        sdk.explain(pointwise, x, x, backend=BACKEND, mode="max-autotune"),
        sdk.explain(pointwise, x, x, mode="max-autotune"),
    ):
        assert not report.compiled_now, report.compile_note
    assert tp.dynamo_graph_count() == graphs

    other = sdk.explain(compiled, x, x, backend=BACKEND, mode="default")
    assert other.compiled_now, other.compile_note
    note = other.compile_note
    assert "autotune=True (asked: False)" in note, note
    assert "wrappers=graph_capture (asked: none)" in note, note
    assert "Capability" not in note and "<" not in note, note
    with pytest.raises(sdk.OptionError, match="unknown mode 'fastest'"):
        sdk.explain(pointwise, x, x, backend=BACKEND, mode="fastest")


def test_explain_compiles_where_it_must_and_says_why(seeded):
    def f(x):
        return torch.sin(x) * 2

    x = torch.randn(4, 8)
    first = sdk.explain(f, x)
    assert first.compiled_now and first.dynamo_compiles == 1, str(first)
    assert first.compile_note == "compiled now: not compiled in this process"
    assert not sdk.explain(f, x).compiled_now  # explain's own compile is reused

    other = sdk.explain(f, x, fusion=False)
    assert other.compiled_now and other.dynamo_compiles == 1
    assert "with other options: fusion=True (asked: False)" in other.compile_note
    assert [g.kernels[0].ops for g in other.graphs] == [("aten.sin.default",)]

    bigger = sdk.explain(f, torch.randn(5, 8))  # Dynamo's guards fail: a compile
    assert bigger.compiled_now and bigger.dynamo_compiles == 1, bigger.compile_note

    def g(x):
        return torch.cos(x) + 1

    eager = torch.compile(g, backend="eager")
    eager(x)
    for target in (g, eager):  # (explain(g) first: it leaves a graph of sdk:cpu_cpp for g)
        report = sdk.explain(target, x)
        assert report.compiled_now and "'eager'" in report.compile_note, report.compile_note
        assert [r.plugin for r in report.graphs] == ["cpu_cpp"]


def test_graph_breaks_carry_dynamo_s_reason_and_the_line(capsys):
    x = torch.rand(6) + 0.1
    report = sdk.explain(with_breaks, x)
    assert report.graph_breaks == 2, str(report)
    printed, branched = report.breaks
    assert "print" in printed.reason, printed.reason
    assert "item" in branched.reason, branched.reason
    for b in report.breaks:
        assert "test_explain.py:" in b.where and b.where.endswith("in with_breaks"), b.where
        assert "\n" not in b.summary and b.summary in report.text(verbose=True)
        assert f"  graph break at {b.where}: " in str(report)  # (wrapped past 160 characters)
    again = sdk.explain(with_breaks, x)  # not compiled again: the reasons kept with the graphs
    assert not again.compiled_now, again.compile_note
    assert again.breaks == report.breaks

    from sdk.tools.demo import _print_explain  # what `python -m sdk run` prints

    capsys.readouterr()
    _print_explain(report)
    out = capsys.readouterr().out
    assert "2 graph break(s)" in out
    assert all(str(b) in out for b in report.breaks), out


_log = logging.getLogger("user code")


def breaks_first(x):
    _log.warning("before anything")  # a break with nothing traced before it: it ends no graph
    return torch.cos(x) * 2


def _helper_that_logs(y):
    _log.warning("inside a helper")  # the break is here, inside the callee
    return y


def breaks_in_a_callee(x):
    y = torch.sin(x) + 1
    y = _helper_that_logs(y)
    return torch.cos(y)


def test_every_graph_break_has_its_line_and_torch_s_hint(caplog):
    """A break that ends no graph the SDK compiled (nothing traced before it) still gets the
    user's line, from what Dynamo logged; a graph that ended before a step Dynamo could not
    trace (its raw reason ``step_unsupported``) takes the reason logged inside the callee,
    counted once; torch's hint is printed; and ``TORCH_LOGS=sdk`` (the sdk logger at INFO)
    has a line for each break."""
    x = torch.rand(5)
    with caplog.at_level(logging.INFO, logger="sdk"):
        first = sdk.explain(breaks_first, x)
        callee = sdk.explain(breaks_in_a_callee, x)
    for report, line in ((first, "in breaks_first"), (callee, "in _helper_that_logs")):
        assert report.graph_breaks >= 1, str(report)
        for b in report.breaks:
            assert "test_explain.py:" in b.where and b.where.endswith(line), (b.where, str(b))
            assert "logging.Logger" in b.summary, b.summary
            assert b.hints and "ignore_logging_functions" in str(b), str(b)
            assert "step_unsupported" not in str(report), str(report)
    logged = [r.getMessage() for r in caplog.records if "graph break at" in r.getMessage()]
    assert any("in breaks_first" in m and "ignore_logging_functions" in m for m in logged), logged


def test_a_raw_reason_takes_the_reason_logged_in_its_stack():
    from sdk.core import records
    from sdk.report import GraphBreak

    seen = [GraphBreak("step_unsupported", "model.py:10 in forward")]
    sites = [("Logger method", ("model.py:10 in forward", "utils.py:3 in loss"))]
    got = records.breaks_of(seen, {"Logger method": 3}, sites)
    assert [(b.reason, b.where) for b in got] == [
        ("Logger method", "utils.py:3 in loss"),  # the raw code's graph, said once
        ("Logger method", ""),  # the other two: counted, not logged with a line
        ("Logger method", ""),
    ]
    assert "step_unsupported" not in str(GraphBreak("step_unsupported", "m.py:1 in f"))


def test_the_reports_go_with_dynamo_s_compiled_graphs(seeded):
    def f(x):
        return torch.exp(x) - 1

    x = torch.randn(5)
    compiled = torch.compile(f, backend=BACKEND)
    compiled(x)
    report = sdk.explain(compiled, x)
    assert not report.compiled_now
    kept = weakref.ref(report.graphs[0])
    del report
    gc.collect()
    assert kept() is not None  # Dynamo's compiled graph holds it
    torch._dynamo.reset()
    gc.collect()
    assert kept() is None  # and nothing else


def test_each_graph_reports_its_compile_stages_and_their_times(seeded, graph_reports):
    """A compile's stages (core/stages) each say what they took: AOTAutograd for the first
    graph it made, the build of every variant, the wrap; explain prints them on one line."""
    model, x = models.mlp(16, 32, 4, layernorm=True), torch.randn(8, 16)
    compiled = torch.compile(model, backend=BACKEND)
    compiled(x).sum().backward()
    by_kind = {g.kind: g for g in graph_reports}
    forward, backward = by_kind["forward"], by_kind["backward"]
    assert list(forward.stage_seconds) and set(forward.stage_seconds) == {"aot", "build", "wrap"}
    assert "aot" not in backward.stage_seconds  # (traced with the forward)
    assert backward.stage_seconds["build"] > 0
    for g in (forward, backward):
        assert all(t >= 0 for t in g.stage_seconds.values())
        # the build is part of the graph's compile, which wraps it
        assert g.stage_seconds["build"] <= g.compile_seconds
    line = next(ln for ln in str(forward).splitlines() if ln.strip().startswith("stages:"))
    assert line.strip().startswith("stages: aot ") and ", build " in line and ", wrap " in line
    assert "stages: " in str(sdk.explain(compiled, x))


def test_a_reason_shared_by_many_fallbacks_is_printed_once():
    """A compiler error sends every op of a graph to ATen with one reason of several lines:
    the report prints it once per graph with the ops it hit, and a later graph of the same
    report whose reason opens with the same line refers to it instead of printing it again."""
    error = "sdk:x failed: CompileError: compilation failed: fatal error\ncommand: cc a.c"
    other = error.replace("a.c", "b.c")  # (another graph's source file, the same error)
    forward = sdk.GraphReport("g0_forward", "forward", "x", aten_ops=3)
    forward.fallbacks[:] = [
        sdk.FallbackReport("aten.mm.default", error, "mm"),
        sdk.FallbackReport("aten.mm.default", error, "mm_1"),
        sdk.FallbackReport("aten.relu.default", error, "relu"),
        sdk.FallbackReport("aten.nonzero.default", "no lowering", "nonzero"),
    ]
    backward = sdk.GraphReport("g0_backward", "backward", "x", aten_ops=1)
    backward.fallbacks[:] = [sdk.FallbackReport("aten.mm.default", other, "mm_2")]
    text = str(sdk.ExplainReport(graphs=[forward, backward]))
    assert text.count("fatal error") == 2 and text.count("command:") == 1, text
    assert "  fallback of 3 ops: sdk:x failed" in text, text
    assert "    ops: aten.mm.default (mm, mm_1), aten.relu.default (relu)" in text, text
    assert "  fallback aten.nonzero.default (nonzero): no lowering" in text, text
    assert "(the rest as for graph g0_forward above)" in text, text
    alone = str(backward)  # printed on its own, a graph's report has the reason whole
    assert "command: cc b.c" in alone, alone


def test_interleaved_compiles_each_report_their_own_aot_stage(seeded, graph_reports):
    """Per-graph state (issue 48) lives with each Dynamo graph, not on a shared session: two
    models compiled in one thread, forwards first and backwards later (in the other order),
    each forward reports its own AOTAutograd time, each backward none, and a backward is
    named after its own forward's Dynamo graph."""
    a, b = models.mlp(16, 32, 4), models.mlp(8, 8, 2, layernorm=True)
    xa, xb = torch.randn(4, 16), torch.randn(4, 8)
    ca, cb = torch.compile(a, backend=BACKEND), torch.compile(b, backend=BACKEND)
    ya, yb = ca(xa), cb(xb)
    torch.testing.assert_close(ya, a(xa))
    torch.testing.assert_close(yb, b(xb))
    yb.sum().backward()
    ya.sum().backward()
    forwards = [g for g in graph_reports if g.kind == "forward"]
    backwards = [g for g in graph_reports if g.kind == "backward"]
    assert len(forwards) == len(backwards) == 2, [g.name for g in graph_reports]
    assert [g.name.split("_")[0] for g in backwards] == [
        g.name.split("_")[0] for g in reversed(forwards)
    ]
    for g in forwards:
        assert g.stage_seconds["aot"] >= 0
        line = next(ln for ln in str(g).splitlines() if ln.strip().startswith("stages:"))
        assert line.strip().startswith("stages: aot "), line
    assert all("aot" not in g.stage_seconds for g in backwards)
