"""Split reductions chosen by the reduction's shape: BatchNorm's statistics and gradients in
NCHW (rows) and channels-last (columns), LayerNorm's gamma and beta gradients, a column sum,
through ``torch.compile`` with the cuda_triton plugin, against eager.

Without a GPU the kernels run under Triton's interpreter (conftest sets TRITON_INTERPRET=1),
so the models are small and the split's thresholds are lowered here (``_small_split``) to
split their reductions; tests/plugins/cuda_triton/test_triton_render.py checks that the real
thresholds split the real shapes (BatchNorm over 16x56x56 per channel). What was split is
read from ``sdk.explain``: a split kernel's source heads its header with ``# split: N kernels
(names)`` and holds one ``@triton.jit`` function per kernel.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch

import sdk
from sdk.tools.bench_check import dynamo_rmse_rule
from tests.plugins_under_test import PLUGINS, device_of

pytest.importorskip("triton")
_TRITON = [p for p in PLUGINS if getattr(p, "values", (p,))[0] == "cuda_triton"]
DEV = device_of("cuda_triton")


@pytest.fixture
def _small_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thresholds that split this file's small reductions, in a few chunks of a few loop
    iterations each, as for a GPU of 4 SMs (the interpreter runs each program in Python)."""
    from sdk.plugins.cuda_triton import heuristics

    monkeypatch.setattr(heuristics, "SPLIT_BY_GRID", True)
    monkeypatch.setattr(heuristics, "MIN_PROGRAMS", 8)
    monkeypatch.setattr(heuristics, "SPLIT_MIN_INNER", 256)
    monkeypatch.setattr(heuristics, "SPLIT_MIN_INNER_COLUMNS", 256)
    monkeypatch.setattr(heuristics, "SPLIT_MIN_CHUNK", 128)
    monkeypatch.setattr(heuristics, "SPLIT_TARGET_PROGRAMS", 24)
    monkeypatch.setattr(heuristics, "SPLIT_OUTER_MIN_CHUNK", 128)
    monkeypatch.setattr(heuristics, "SPLIT_OUTER_TARGET_PROGRAMS", 24)
    monkeypatch.setattr(heuristics, "SPLIT_OUTER_MIN_PROGRAMS", 8)
    monkeypatch.setattr(heuristics, "SPLIT_RBLOCK", 64)
    monkeypatch.setattr(heuristics, "SPLIT_OUTER_TILE", 128)


def _chain(source: str) -> list[str] | None:
    """A split kernel's chain, in launch order: "pre" for a kernel over chunks of the
    reduction (it takes RBLOCK), "flat" for one of a tile a program (the header names it),
    "main" for one that combines per row; None for a kernel that is not split."""
    m = re.search(r"^# split: (\d+) kernels \(([^)]*)\)", source, re.M)
    if m is None:
        assert ": split," not in source.splitlines()[0], source[:500]
        return None
    names = m.group(2).split(", ")
    assert len(names) == int(m.group(1))
    flat = re.search(r"^# flat: (.*): one tile a program", source, re.M)
    flat = set(flat.group(1).split(", ")) if flat else set()
    kinds = []
    for name in names:
        (sig,) = re.findall(rf"^def {name}\((.*)\):$", source, re.M)
        pre = "RBLOCK: tl.constexpr" in sig
        kinds.append("flat" if name in flat else "pre" if pre else "main")
    return kinds


def _per_row(report: sdk.ExplainReport, kind: str, xnumel: int) -> list[sdk.KernelReport]:
    """The kernels of the ``kind`` graph that reduce, over ``xnumel`` outer points."""
    (graph,) = [g for g in report.graphs if g.kind == kind]
    return [
        k
        for k in graph.kernels
        if f"(xnumel {xnumel})" in k.source
        and re.search(r"^# stage \d+: r\S+ < .*-> red", k.source, re.M)
    ]


def _compare(module: torch.nn.Module, ref: torch.nn.Module, x: torch.Tensor, w: torch.Tensor):
    """``(module(x) * w).sum()`` compiled against eager on ``ref`` (a copy), twice (the second
    time on other values, through the same kernels): the loss, the gradients of ``x`` and of
    the parameters, and the buffers (running statistics)."""
    tol = {"rtol": 1e-4, "atol": 1e-4}
    compiled = torch.compile(
        lambda x, w: (module(x) * w).sum(), backend=sdk.backend("cuda_triton", fallback=False)
    )
    for shift in (0.0, 0.5):
        x1, x2 = (x + shift).requires_grad_(), (x + shift).requires_grad_()
        got, want = compiled(x1, w), (ref(x2) * w).sum()
        torch.testing.assert_close(got, want, **tol)
        got.backward()
        want.backward()
        torch.testing.assert_close(x1.grad, x2.grad, **tol)
    for (name, a), b in zip(module.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, **tol, msg=name)
    for (name, a), b in zip(module.named_buffers(), ref.buffers()):
        torch.testing.assert_close(a, b, **tol, msg=name)
    return sdk.explain(compiled, x1, w)  # (the graphs just compiled: not compiled again)


def _pair(cls, *args) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    m, ref = cls(*args).to(DEV), cls(*args).to(DEV)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    ref.load_state_dict(m.state_dict())
    return m, ref


@pytest.mark.parametrize("plugin", _TRITON)
@pytest.mark.parametrize("last", [True, False], ids=["last_program", "second_kernel"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_batchnorm_training_splits_statistics_and_gradients(
    plugin, channels_last, last, _small_split, monkeypatch
):
    """BatchNorm2d in training, forward and backward: every reduction over a channel's
    elements in chunks (the statistics' two passes, a sum then the squared deviations: two
    kernels, each combining its chunks in its last program per block of channels, or four
    with a second kernel per pass; the backward's sums, then the input gradient over chunks
    too); the loss, the running statistics and the gradients as eager's, at a second call
    too (the last program's counters are back at 0)."""
    from sdk.plugins.cuda_triton import heuristics

    monkeypatch.setattr(heuristics, "SPLIT_LAST_PROGRAM_COMBINES", last)
    bn, ref = _pair(torch.nn.BatchNorm2d, 6)
    x = torch.randn(4, 6, 12, 12, device=DEV) * 2 + 1  # 576 elements per channel
    w = torch.randn(4, 6, 12, 12, device=DEV)
    if channels_last:
        x, w = (t.to(memory_format=torch.channels_last) for t in (x, w))
    report = _compare(bn, ref, x, w)
    forward, backward = _per_row(report, "forward", 6), _per_row(report, "backward", 6)
    assert forward and backward, [k.source[:300] for g in report.graphs for k in g.kernels]
    assert all(_chain(k.source) is not None for k in forward + backward)
    (stats,) = [k for k in forward if "aten.var_mean.correction" in k.ops]
    want = ["pre", "pre"] if last else ["pre", "main", "pre", "main"]
    assert _chain(stats.source) == want, stats.source
    # the input gradient: stored per element by the backward's last kernel, a flat one
    (grad,) = [k for k in backward if re.search(r"^# stage \d+: r\S+ < .*store", k.source, re.M)]
    assert _chain(grad.source)[-1] == "flat", grad.source


@pytest.fixture
def _by_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split by the grid's size (the default, set whatever it becomes), real thresholds."""
    from sdk.plugins.cuda_triton import heuristics

    monkeypatch.setattr(heuristics, "SPLIT_BY_GRID", True)


@pytest.mark.parametrize("plugin", _TRITON)
def test_column_sum_splits_with_real_thresholds(plugin, _by_grid):
    """``x.sum(0)`` over 20000 rows of 8 columns, with the real thresholds: unsplit, one
    program of [8, RBLOCK] tiles would loop over every row; split, chunks of rows, each in
    tiles along the columns, and the last program to finish sums the chunks' partials per
    column."""

    def f(x):
        return x.sum(0)

    compiled = torch.compile(f, backend=sdk.backend("cuda_triton", fallback=False))
    for _ in range(3):  # the same kernels each time: the last program's counters reset
        x = torch.randn(20000, 8, device=DEV)
        torch.testing.assert_close(compiled(x), x.double().sum(0).float(), rtol=1e-5, atol=1e-4)
    report = sdk.explain(f, x, backend="sdk:cuda_triton", fallback=False)
    ((k,),) = [g.kernels for g in report.graphs]
    assert _chain(k.source) == ["pre"], k.source  # its last program per block combines
    assert "split * 8 + xindex" in k.source  # partials stored along the columns


@pytest.mark.parametrize("plugin", _TRITON)
def test_channels_last_batchnorm_splits_short_columns_with_real_thresholds(plugin, _by_grid):
    """BatchNorm2d in training over channels-last activations with the real thresholds: 8
    channels of 4x32x36 = 4608 elements, columns of a multi-stage kernel (statistics, then
    per channel, then per element), so over ``SPLIT_MIN_INNER_COLUMNS`` rows, on one block
    of 8 columns (few programs: chunks of ``SPLIT_MIN_CHUNK`` elements, 9 of them): split
    into chains in the forward and the backward, values and gradients as eager's."""
    bn, ref = _pair(torch.nn.BatchNorm2d, 8)
    x = (torch.randn(4, 8, 32, 36, device=DEV) * 2 + 1).to(memory_format=torch.channels_last)
    w = torch.randn(4, 8, 32, 36, device=DEV).to(memory_format=torch.channels_last)
    report = _compare(bn, ref, x, w)
    forward, backward = _per_row(report, "forward", 8), _per_row(report, "backward", 8)
    assert forward and backward, [k.source[:300] for g in report.graphs for k in g.kernels]
    (stats,) = [k for k in forward if "aten.var_mean.correction" in k.ops]
    assert _chain(stats.source) == ["pre", "pre"], stats.source
    assert all(_chain(k.source) is not None for k in backward), [k.source for k in backward]


@pytest.mark.parametrize("plugin", _TRITON)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_batchnorm_over_a_batch_of_as_many_images_as_channels_splits(plugin, dtype, _by_grid):
    """Channels-last BatchNorm2d in training over 8 images of 8 channels (mobilenet_v3's
    first layers at batch 16: 16 channels): every reduction splits as for another batch
    size, and each kernel reads the input in one order. A member of [N, C, H, W] elements
    fits the reduction's loops ([C] x [N, H, W]) by size with its batch dim on the channel
    loop too; mapped so, the kernel read the input in two orders on one program per channel
    (16 of them, 0.1 ms each on an H200); and the weight's cast to float, in a stage of its
    own before the loop, kept the kernel from splitting. Values: eager's (fp32), or as near
    an fp64 copy as eager's by Dynamo's accuracy rule (bf16)."""
    bn, ref = _pair(torch.nn.BatchNorm2d, 8)
    bn64 = copy.deepcopy(ref).double()
    bn, ref = bn.to(dtype), ref.to(dtype)
    x = (torch.randn(8, 8, 20, 15, device=DEV) * 2 + 1).to(dtype, memory_format=torch.channels_last)
    w = torch.randn(8, 8, 20, 15, device=DEV, dtype=dtype).to(memory_format=torch.channels_last)
    compiled = torch.compile(
        lambda x, w: (bn(x) * w).float().sum(), backend=sdk.backend("cuda_triton", fallback=False)
    )
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_(), x.double().requires_grad_()]
    losses = [compiled(xs[0], w), (ref(xs[1]) * w).float().sum(), (bn64(xs[2]) * w.double()).sum()]
    for loss in losses:
        loss.backward()
    got, want, fp64 = (
        [loss.detach().reshape(1), t.grad, *(p.grad for p in m.parameters())]
        for loss, t, m in zip(losses, xs, (bn, ref, bn64))
    )
    for a, b, c in zip(got, want, fp64, strict=True):
        if dtype == torch.float32:
            torch.testing.assert_close(a.float(), b.float(), rtol=1e-4, atol=1e-3)
        else:
            ok, why = dynamo_rmse_rule(b, a, c, 1e-2)
            assert ok, why
    report = sdk.explain(compiled, xs[0], w)
    kernels = _per_row(report, "forward", 8) + _per_row(report, "backward", 8)
    assert kernels, [k.source[:300] for g in report.graphs for k in g.kernels]
    for k in kernels:
        assert _chain(k.source) is not None, k.source
        for buf, reads in _loads(k.source).items():
            assert len(reads) == 1, (buf, reads, k.source)


def _loads(source: str) -> dict[str, set[str]]:
    """Each pointer a kernel loads -> the index expressions it loads it at (modulo masks)."""
    out: dict[str, set[str]] = {}
    for ptr, index in re.findall(r"tl\.load\((\w+)_ptr \+ (.*?), [^,]*mask", source):
        out.setdefault(ptr, set()).add(index)
    return out


@pytest.mark.parametrize("plugin", _TRITON)
def test_layernorm_gamma_beta_gradients_split(plugin, _small_split):
    """LayerNorm in training over 300 rows of 20: its weight and bias gradients are column
    sums over the rows, split into chunks of rows; the rows' statistics (300 rows of 20:
    enough programs, short rows) are not. Values and gradients as eager's."""
    ln, ref = _pair(torch.nn.LayerNorm, 20)
    x, w = torch.randn(300, 20, device=DEV), torch.randn(300, 20, device=DEV)
    report = _compare(ln, ref, x, w)
    columns = _per_row(report, "backward", 20)
    assert columns, [k.source[:300] for g in report.graphs for k in g.kernels]
    assert all(_chain(k.source) == ["pre"] for k in columns)
    rows = _per_row(report, "forward", 300) + _per_row(report, "backward", 300)
    assert rows and all(_chain(k.source) is None for k in rows)


@pytest.mark.parametrize("plugin", _TRITON)
@pytest.mark.parametrize("columns_first", [True, False], ids=["columns_first", "chunks_first"])
def test_channels_last_batchnorm_over_two_blocks_of_columns(
    plugin, columns_first, _small_split, monkeypatch
):
    """Channels-last BatchNorm2d in training over 40 channels: two blocks of 32 columns, the
    second one partial, each with its own chunks and its own last program's counter, whichever
    grid axis the blocks take (``SPLIT_COLUMNS_FIRST``). Loss, gradients and running
    statistics as eager's, at a second call too; the first kernels read the chunk from the
    other axis than the block."""
    from sdk.plugins.cuda_triton import heuristics

    monkeypatch.setattr(heuristics, "SPLIT_COLUMNS_FIRST", columns_first)
    bn, ref = _pair(torch.nn.BatchNorm2d, 40)
    x = (torch.randn(2, 40, 12, 12, device=DEV) * 2 + 1).to(memory_format=torch.channels_last)
    w = torch.randn(2, 40, 12, 12, device=DEV).to(memory_format=torch.channels_last)
    report = _compare(bn, ref, x, w)
    kernels = _per_row(report, "forward", 40) + _per_row(report, "backward", 40)
    assert kernels and all(_chain(k.source) is not None for k in kernels)
    chunk_axis = "tl.program_id(1)" if columns_first else "tl.program_id(0)"
    for k in kernels:
        assert re.search(rf"^    split = {re.escape(chunk_axis)}$", k.source, re.M), k.source


def test_a_flat_kernel_keeps_its_blocks_of_rows_first_past_the_grids_second_axis():
    """A column reduction's kernels take their blocks of columns from the first grid axis,
    unless what goes on the second (a flat kernel's blocks of rows) is more than CUDA's
    65535 programs; a row reduction's keep chunks first."""
    from sdk.plugins.cuda_triton import heuristics

    columns = heuristics.Plan("split", 64, 3_211_264, {}, split=256, chunk=12544, outer=True)
    rows = heuristics.Plan("split", 64, 3_211_264, {}, split=256, chunk=12544, outer=False)
    assert heuristics.columns_first(columns, 256) == heuristics.SPLIT_COLUMNS_FIRST
    assert heuristics.columns_first(columns, 65535) == heuristics.SPLIT_COLUMNS_FIRST
    assert not heuristics.columns_first(columns, 65536)
    assert not heuristics.columns_first(rows, 256)
