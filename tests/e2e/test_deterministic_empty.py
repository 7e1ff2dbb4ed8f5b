"""``torch.use_deterministic_algorithms(True)``: an empty tensor (``torch.empty``,
``new_empty``, ``empty_like``, ``empty_strided``, ``new_empty_strided``) read or returned by a
compiled graph holds what eager fills it with (``torch.utils.deterministic.
fill_uninitialized_memory``): NaN for floating dtypes, the dtype's largest value otherwise, on
both plugins and both runners. Without deterministic mode its values stay unspecified: no
fill of eager's is made (``sdk.explain`` has no note of it), and toggling the mode
recompiles, in Dynamo and in the whole-graph cache alike."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

import sdk
from sdk.core.lowering.elementwise import DETERMINISTIC_EMPTY
from tests.plugins_under_test import PLUGINS, device_of

RUNNERS = ["python", "native"]


@contextmanager
def _deterministic(on: bool, fill: bool = True):
    was = (
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(on)
    torch.utils.deterministic.fill_uninitialized_memory = fill
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was[0])
        torch.utils.deterministic.fill_uninitialized_memory = was[1]


def empties(x):
    return (
        torch.empty(3, 4, device=x.device),
        x.new_empty((2, 5), dtype=torch.int32),
        torch.empty_like(x),
        torch.empty_strided((3, 2), (1, 3), device=x.device),
        x.new_empty_strided((2, 2), (1, 2), dtype=torch.int64),
        x.new_empty((3,), dtype=torch.bool),
        x.new_empty((4,), dtype=torch.int8),
        x.new_empty((4,), dtype=torch.float64),
        # read, not only returned
        torch.empty(4, 4, device=x.device) * 0 + x,
        x.new_empty((4,), dtype=torch.int64) // 2,
    )


def _options(runner: str) -> dict:
    return {"runner": runner}


def _fallbacks(report) -> set[str]:
    # empty_like decomposes to empty_permuted, which runs in ATen (its fill is eager's own)
    return {f.op for f in report.fallbacks} - {"aten.empty_permuted.default"}


def _check_like_eager(got, want) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert (g.shape, g.stride(), g.dtype) == (w.shape, w.stride(), w.dtype), i
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0, msg=f"output {i}")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("plugin", PLUGINS)
def test_empty_tensors_hold_what_eager_fills_them_with(plugin, runner):
    x = torch.randn(4, 4, device=device_of(plugin))
    with _deterministic(True):
        want = empties(x)
        assert torch.isnan(want[0]).all() and (want[1] == 2**31 - 1).all()  # (eager's fill)
        report = sdk.explain(empties, x, backend=f"sdk:{plugin}", **_options(runner))
        got = torch.compile(empties, backend=f"sdk:{plugin}", options=_options(runner))(x)
    _check_like_eager(got, want)
    assert any(DETERMINISTIC_EMPTY in g.notes for g in report.graphs), str(report)
    assert not _fallbacks(report), str(report)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_without_deterministic_mode_no_fill_of_eager_s_and_toggling_recompiles(plugin):
    x = torch.randn(4, 4, device=device_of(plugin))
    # (runner pinned: SDK_RUNNER=check would compare the unspecified bytes of the empties)
    compiled = torch.compile(empties, backend=f"sdk:{plugin}", options=_options("native"))
    with sdk.collect_reports() as off:
        got = compiled(x)
    assert [DETERMINISTIC_EMPTY in g.notes for g in off.graphs] == [False], str(off)
    for g, w in zip(got, empties(x), strict=True):
        assert (g.shape, g.stride(), g.dtype) == (w.shape, w.stride(), w.dtype)
    with _deterministic(True), sdk.collect_reports() as on:
        got = compiled(x)  # Dynamo's guard on the mode: compiled again
        want = empties(x)
    assert [DETERMINISTIC_EMPTY in g.notes for g in on.graphs] == [True], str(on)
    _check_like_eager(got, want)


@pytest.mark.parametrize("fill", [True, False])
def test_a_fully_written_empty_is_no_kernel_in_either_mode(fill):
    def f(x):
        out = torch.empty(x.shape)
        out.copy_(x * 2)
        return out, x.new_empty(x.shape).fill_(3.0)

    x = torch.randn(8, 8)
    counts = []
    for on in (False, True):
        torch._dynamo.reset()
        with _deterministic(on, fill):
            report = sdk.explain(f, x, backend="sdk:cpu_cpp", fallback=False)
            got = torch.compile(f, backend="sdk:cpu_cpp")(x)
        torch.testing.assert_close(got, f(x))
        counts.append(len(report.kernels))
    assert counts[0] == counts[1], counts


def test_the_whole_graph_cache_keeps_the_modes_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    x = torch.randn(4, 4)
    native = _options("native")  # (pinned: unspecified bytes are no check's to compare)
    torch.compile(empties, backend="sdk:cpu_cpp", options=native)(x)  # stored, not deterministic
    torch._dynamo.reset()
    with _deterministic(True):
        got = torch.compile(empties, backend="sdk:cpu_cpp", options=native)(x)
        want = empties(x)
    _check_like_eager(got, want)
