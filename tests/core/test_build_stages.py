"""Issue 48: the build of an ATen graph variant is a table of named stages over typed artifacts
(``core/build_stages``), run by a driver that hands each stage's artifact to an inspection hook;
``sdk.explain`` reports each graph's stage times through it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import sdk
from sdk.core import build_stages

BUILD = ["passes", "lower", "schedule", "render", "compile", "measure", "program"]


def _f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.gelu(x @ w) + x).sum(-1)


def test_explain_reports_each_graph_s_build_stage_times():
    torch._dynamo.reset()
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 8, requires_grad=True)
    compiled = torch.compile(_f, backend=sdk.backend("cpu_cpp", cache=False))
    with sdk.collect_reports() as report:
        out = compiled(x, w)
        out.sum().backward()
    torch.testing.assert_close(out, _f(x, w))
    by_kind = {g.kind: g for g in report.graphs}
    assert set(by_kind) == {"forward", "backward"}, str(report)
    assert "build stages: passes " in str(report), str(report)
    for g in by_kind.values():
        assert list(g.build_stages) == BUILD, g.build_stages
        assert all(t >= 0 for t in g.build_stages.values())
        assert sum(g.build_stages.values()) <= g.stage_seconds["build"] + 1e-6
        line = next(s for s in str(g).splitlines() if s.strip().startswith("build stages:"))
        assert all(f"{name} " in line for name in BUILD), line


def test_the_inspection_hook_sees_each_stage_s_artifact_in_the_table_s_order():
    torch._dynamo.reset()
    seen: list[tuple[str, str, float]] = []
    compiled = torch.compile(_f, backend=sdk.backend("cpu_cpp", cache=False))
    inspector = lambda s, a, t: seen.append((s, type(a).__name__, t))  # noqa: E731
    with build_stages.inspecting(inspector), torch.no_grad():
        compiled(torch.randn(4, 8), torch.randn(8, 8))
    assert [s for s, _, _ in seen] == BUILD, seen
    makes = {s.name: s.makes.__name__ for s in build_stages.STAGES}
    assert [a for _, a, _ in seen] == [makes[s] for s in BUILD], seen
    assert all(t >= 0 for _, _, t in seen)


@dataclass
class _A:
    n: int

    def summary(self) -> str:
        return str(self.n)


@dataclass
class _B(_A):
    pass


def _stages(*runs) -> tuple[build_stages.Stage, ...]:
    return tuple(build_stages.Stage(name, run, _A, _A) for name, run in runs)


def _ctx():
    from sdk.plugin import CompileContext

    return CompileContext(
        plugin="x",
        device_type="cpu",
        graph_kind="inference",
        graph_name="g",
        options={},
        capabilities=frozenset(),
    )


def test_the_driver_goes_back_where_a_stage_answers_again():
    calls = []

    def first(session, ctx, a):
        calls.append(("first", a.n))
        return _A(a.n + 1)

    def second(session, ctx, a):
        calls.append(("second", a.n))
        if a.n < 3:
            return build_stages.Again("first", _A(a.n), "once more")
        return _A(a.n * 10)

    class _Done(_A):
        parts = type("P", (), {})()

    def last(session, ctx, a):
        return _Done(a.n)

    seen = []
    with build_stages.inspecting(lambda s, a, t: seen.append((s, a.summary()))):
        out = build_stages.run(
            None, _ctx(), _A(0), _stages(("first", first), ("second", second), ("last", last))
        )
    assert out.n == 30
    assert calls == [
        ("first", 0),
        ("second", 1),
        ("first", 1),
        ("second", 2),
        ("first", 2),
        ("second", 3),
    ]
    assert [s for s, _ in seen] == ["first", "second"] * 3 + ["last"]
    assert seen[1][1] == "again from first: once more"
    assert set(out.parts.stage_seconds) == {"first", "second", "last"}


def test_the_driver_names_a_stage_that_makes_the_wrong_artifact():
    table = (build_stages.Stage("lower", lambda s, c, a: "not an artifact", _A, _B),)
    with pytest.raises(TypeError, match="build stage lower makes a _B, made a str"):
        build_stages.run(None, _ctx(), _A(0), table)
    table = (
        build_stages.Stage("late", lambda s, c, a: build_stages.Again("later", a, "?"), _A, _A),
    )
    with pytest.raises(ValueError, match="build stage late asked for 'later' again"):
        build_stages.run(None, _ctx(), _A(0), table)


def test_an_op_over_the_kernel_limits_alone_is_lowered_again_around(
    make_plugin, fake_dist, use_registry
):
    from tests.contract.test_kernel_limits import VENDOR, _fn, _inputs

    mod = make_plugin(VENDOR, name="narrow", head=False)
    use_registry(fake_dist("narrow-sdk-plugin", {"narrow": mod}))
    torch._dynamo.reset()
    seen: list[tuple[str, object]] = []
    args = _inputs()
    compiled = torch.compile(_fn, backend=sdk.backend("narrow", cache=False))
    with (
        build_stages.inspecting(lambda s, a, t: seen.append((s, a))),
        sdk.collect_reports() as report,
    ):
        out = compiled(*args)
    torch.testing.assert_close(out, _fn(*args))
    # where(cond, x, c) alone takes 4 buffers of 3: the schedule stage sends it to ATen and
    # the driver lowers the graph again around it
    again = [a for s, a in seen if isinstance(a, build_stages.Again)]
    assert [a.stage for a in again] == ["lower"], seen
    names = [s for s, _ in seen]
    assert names == ["passes", "lower", "schedule", "lower", "schedule", *BUILD[3:]], names
    (graph,) = report.graphs
    assert any("sdk_kernel_limits" in f.reason for f in graph.fallbacks), str(report)
    assert graph.build_stages["lower"] > 0 and list(graph.build_stages) == BUILD
