"""cpu_cpp: an out-of-range indirect index raises IndexError instead of reading a
clamped element silently.

The kernel still reads the clamped element (memory stays safe), records the bad
index in the calling thread's error slot, and the launcher raises after it
returns. Kernels without indirect loads are untouched.
"""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import sdk
import sdk.toolchain
from sdk import ir
from sdk.plugins import cpu_cpp
from sdk.plugins.cpu_cpp import render, toolchain
from tests.ir_kernels import window_kernel

F32, I64 = torch.float32, torch.int64


def _has_compiler() -> bool:
    try:
        sdk.toolchain.find_compiler(toolchain.LANGUAGE)
    except FileNotFoundError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _has_compiler(), reason="no C++ compiler")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()


def compiled(fn):
    return torch.compile(fn, backend="sdk:cpu_cpp")


def bounds_error(index: int, size: int) -> str:
    return rf"^index {index} is out of bounds for dimension with size {size} \(kernel k_\w+\)$"


# ----------------------------------------------------------------------------- through torch.compile


def test_embedding_out_of_range_raises() -> None:
    emb = torch.nn.Embedding(50, 8)
    f = compiled(emb)
    good = torch.tensor([[1, 2, 3], [49, 0, 7]])
    with torch.no_grad():
        torch.testing.assert_close(f(good), emb(good))
        with pytest.raises(
            IndexError,
            match=r"index 57 is out of bounds for dimension with size 50 "
            r"\(kernel k_embedding\w*\)",
        ):
            f(torch.tensor([[1, 57, 3], [4, 5, 6]]))
        # the error was taken: a valid call afterwards works and raises nothing
        torch.testing.assert_close(f(good), emb(good))
        with pytest.raises(IndexError, match=bounds_error(50, 50)):
            f(torch.tensor([[1, 2, 3], [4, 5, 50]]))
        torch.testing.assert_close(f(good), emb(good))


def test_embedding_out_of_range_raises_with_grad() -> None:
    emb = torch.nn.Embedding(50, 8)
    f = compiled(emb)
    with pytest.raises(IndexError, match=bounds_error(57, 50)):
        f(torch.tensor([57]))


def test_empty_table_raises_and_reads_nothing() -> None:
    """A dimension of size 0: every index is out of range, and the empty buffer is
    not read at all."""
    emb = torch.nn.Embedding(0, 8)
    with pytest.raises(IndexError, match=bounds_error(0, 0)):
        compiled(emb)(torch.tensor([0]))


def test_negative_in_range_indices_work() -> None:
    x = torch.randn(50, 16)
    f = compiled(lambda x, i: x[i] * 2)
    for i in ([-1], [-50, 49, 0, -7]):
        t = torch.tensor(i)
        torch.testing.assert_close(f(x, t), x[t] * 2)


def test_negative_out_of_range_reports_the_index_as_written() -> None:
    x = torch.randn(50, 16)
    f = compiled(lambda x, i: x[i] * 2)
    with pytest.raises(IndexError, match=bounds_error(-51, 50)):
        f(x, torch.tensor([3, -51]))
    torch.testing.assert_close(f(x, torch.tensor([3, -50])), x[torch.tensor([3, -50])] * 2)


def test_two_index_tensors() -> None:
    x = torch.randn(50, 16)
    f = compiled(lambda x, i, j: x[i, j])
    i, j = torch.tensor([1, 2, 49]), torch.tensor([3, -16, 15])
    torch.testing.assert_close(f(x, i, j), x[i, j])
    with pytest.raises(IndexError, match=bounds_error(16, 16)):
        f(x, i, torch.tensor([3, 16, 0]))


def test_index_select_out_of_range_raises() -> None:
    x = torch.randn(50, 16)
    f = compiled(lambda x, i: torch.index_select(x, 1, i))
    i = torch.tensor([0, 15, 3])
    torch.testing.assert_close(f(x, i), torch.index_select(x, 1, i))
    with pytest.raises(IndexError, match=bounds_error(16, 16)):
        f(x, torch.tensor([0, 16, 3]))
    torch.testing.assert_close(f(x, i), torch.index_select(x, 1, i))


def test_gather_out_of_range_raises() -> None:
    """The bind sits in the simd loop: the unsigned-max reduction path."""
    x = torch.randn(50, 16)
    f = compiled(lambda x, g: torch.gather(x, 1, g))
    g = torch.randint(0, 16, (50, 4))
    torch.testing.assert_close(f(x, g), torch.gather(x, 1, g))
    bad = g.clone()
    bad[17, 2] = 99
    with pytest.raises(IndexError, match=bounds_error(99, 16)):
        f(x, bad)
    torch.testing.assert_close(f(x, g), torch.gather(x, 1, g))


@pytest.mark.parametrize("bad", [5000, -5001])
def test_parallel_gather_out_of_range_raises(bad: int) -> None:
    """Big enough for the parallel (blocked) pointwise path: OpenMP workers report."""
    x = torch.randn(64, 5000)
    f = compiled(lambda x, g: torch.gather(x, 1, g) * 2)
    g = torch.randint(0, 5000, (64, 5000))
    torch.testing.assert_close(f(x, g), torch.gather(x, 1, g) * 2)
    b = g.clone()
    b[40, 4321] = bad
    with pytest.raises(IndexError, match=bounds_error(bad, 5000)):
        f(x, b)
    torch.testing.assert_close(f(x, g), torch.gather(x, 1, g) * 2)


def test_reductions_over_indirect_loads_raise() -> None:
    x = torch.randn(50, 16)
    emb_sum = compiled(lambda x, i: F.embedding(i, x).sum(-1))  # bind per row
    i = torch.tensor([1, 2, 49])
    torch.testing.assert_close(emb_sum(x, i), F.embedding(i, x).sum(-1))
    with pytest.raises(IndexError, match=bounds_error(55, 50)):
        emb_sum(x, torch.tensor([1, 2, 55]))
    gather_sum = compiled(lambda x, g: torch.gather(x, 1, g).sum(1))  # bind in the simd loop
    g = torch.randint(0, 16, (50, 3))
    torch.testing.assert_close(gather_sum(x, g), torch.gather(x, 1, g).sum(1))
    g[9, 1] = 17
    with pytest.raises(IndexError, match=bounds_error(17, 16)):
        gather_sum(x, g)


def test_split_reduction_over_indirect_loads_raises() -> None:
    """Few long rows: the variant where all threads reduce each row."""
    x = torch.randn(2, 50000)
    f = compiled(lambda x, g: torch.gather(x, 1, g).sum(1))
    g = torch.randint(0, 50000, (2, 50000))
    torch.testing.assert_close(f(x, g), torch.gather(x, 1, g).sum(1), rtol=1e-4, atol=1e-3)
    g[1, 49999] = 50000
    with pytest.raises(IndexError, match=bounds_error(50000, 50000)):
        f(x, g)


def test_errors_are_per_calling_thread() -> None:
    """Concurrent calls (ctypes releases the GIL): only the call with the bad index raises."""
    x = torch.randn(64, 5000)
    f = compiled(lambda x, g: torch.gather(x, 1, g) + 1)
    good = torch.randint(0, 5000, (64, 5000))
    bad = good.clone()
    bad[3, 3] = 7777
    expect = torch.gather(x, 1, good) + 1
    f(x, good)  # compiled before the threads start
    results: dict[str, list] = {"good": [], "bad": []}

    def run(kind: str, g: torch.Tensor) -> None:
        for _ in range(30):
            try:
                out = f(x, g)
                results[kind].append(torch.equal(out, expect))
            except IndexError as e:
                results[kind].append(str(e))

    threads = [threading.Thread(target=run, args=(k, g)) for k, g in (("good", good), ("bad", bad))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["good"] == [True] * 30
    assert len(results["bad"]) == 30
    assert all(isinstance(r, str) and "index 7777 " in r for r in results["bad"])


# ----------------------------------------------------------------------------- the rendered C++


def _layout(sizes: tuple[int, ...], dtype: torch.dtype = F32) -> ir.Layout:
    strides = tuple(torch.empty(sizes, device="meta").stride())
    return ir.Layout(tuple(sizes), strides, 0, dtype, "cpu")


def _wrap(i: ir.Expr, n: int) -> ir.Expr:
    """The lowering's negative wrap: where(i < 0, i + n, i)."""
    lt = ir.Op("lt", (i, ir.Const(0, I64)), torch.bool)
    return ir.Op("where", (lt, ir.Op("add", (i, ir.Const(n, I64)), I64), i), I64)


def embedding_kernel(name: str, vocab: int, dim: int, batch: int) -> ir.Kernel:
    """out[b, d] = weight[idx[b], d]; dim 1 puts the bind into the simd loop."""
    x0, x1, ind = ir.var("x0"), ir.var("x1"), ir.var("ind0")
    lw, li, lo = _layout((vocab, dim)), _layout((batch,), I64), _layout((batch, dim))
    i = ir.Load("idx", x0, I64)
    g = ir.Load("weight", lw.linear((ind, x1)), F32, ((ind, _wrap(i, vocab), vocab),))
    args = [
        ir.BufferArg("weight", lw, "in"),
        ir.BufferArg("idx", li, "in"),
        ir.BufferArg("out", lo, "out"),
    ]
    store = ir.Store("out", lo.linear((x0, x1)), g)
    return ir.Kernel(name, (x0, x1), (batch, dim), [ir.Stage((), (), [], [store])], args)


def gather_sum_kernel(name: str, rows: int, n: int) -> ir.Kernel:
    """out[r] = sum_j x[r, g[r, j]]: a bind in the simd loop of a reduction."""
    x0, r0, ind = ir.var("x0"), ir.var("r0"), ir.var("ind0")
    lx, lg = _layout((rows, n)), _layout((rows, n), I64)
    i = ir.Load("g", lg.linear((x0, r0)), I64)
    v = ir.Load("x", lx.linear((x0, ind)), F32, ((ind, _wrap(i, n), n),))
    stages = [
        ir.Stage((r0,), (n,), [ir.Reduction("s", "sum", v, F32)]),
        ir.Stage((), (), [], [ir.Store("out", x0, ir.LocalRef("s", F32))]),
    ]
    args = [
        ir.BufferArg("x", lx, "in"),
        ir.BufferArg("g", lg, "in"),
        ir.BufferArg("out", _layout((rows,)), "out"),
    ]
    return ir.Kernel(name, (x0,), (rows,), stages, args)


def plain_kernel(name: str, n: int) -> ir.Kernel:
    x0 = ir.var("x0")
    v = ir.Op("mul", (ir.Load("x", x0, F32), ir.Const(2.0, F32)), F32)
    args = [ir.BufferArg("x", _layout((n,)), "in"), ir.BufferArg("out", _layout((n,)), "out")]
    return ir.Kernel(name, (x0,), (n,), [ir.Stage((), (), [], [ir.Store("out", x0, v)])], args)


KERNELS = [
    embedding_kernel("emb_rows", 30000, 64, 300),  # bind outside the simd loop
    embedding_kernel("emb_wide", 30000, 8192, 16),  # parallel, bind per block
    embedding_kernel("emb_col", 30000, 1, 100_000),  # parallel, bind in the simd loop
    embedding_kernel("emb_col_small", 300, 1, 1000),  # serial, bind in the simd loop
    gather_sum_kernel("gather_sum_rows", 64, 1000),
    gather_sum_kernel("gather_sum_split", 2, 50_000),
    plain_kernel("plain", 100_000),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    ctx = sdk.CompileContext(
        "cpu_cpp", "cpu", "inference", "test_cpp_index_errors", {}, frozenset()
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDK_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        sources = [cpu_cpp.sdk_render_kernel(ctx=ctx, kernel=k) for k in KERNELS]
        fns = cpu_cpp.sdk_compile_kernels(ctx=ctx, sources=sources)
    return {
        "fn": {k.name: f for k, f in zip(KERNELS, fns)},
        "src": {k.name: s for k, s in zip(KERNELS, sources)},
    }


@pytest.mark.parametrize("name", ["emb_rows", "emb_wide", "emb_col", "emb_col_small"])
def test_embedding_kernels(built: dict, name: str) -> None:
    k = next(k for k in KERNELS if k.name == name)
    batch, dim = k.sizes
    vocab = k.args[0].layout.sizes[0]
    weight = torch.randn(vocab, dim)
    idx = torch.randint(-vocab, vocab, (batch,))
    out = torch.empty(batch, dim)
    fn = built["fn"][name]
    fn(weight, idx, out)
    assert torch.equal(out, weight[idx])
    for bad, report in ((vocab, vocab), (-vocab - 3, -vocab - 3), (2**62, 2**62)):
        b = idx.clone()
        b[batch // 2] = bad
        out.fill_(float("nan"))
        with pytest.raises(IndexError, match=bounds_error(report, vocab).replace("k_\\w+", name)):
            fn(weight, b, out)
        ok = torch.ones(batch, dtype=torch.bool)
        ok[batch // 2] = False
        assert torch.equal(out[ok], weight[idx[ok]])  # the rest is still computed
        assert not out.isnan().any()  # the bad row read an element of weight
    fn(weight, idx, out)
    assert torch.equal(out, weight[idx])


@pytest.mark.parametrize("name", ["gather_sum_rows", "gather_sum_split"])
def test_gather_sum_kernels(built: dict, name: str) -> None:
    k = next(k for k in KERNELS if k.name == name)
    rows, n = k.sizes[0], k.stages[0].sizes[0]
    x, g = torch.randn(rows, n), torch.randint(-n, n, (rows, n))
    out = torch.empty(rows)
    built["fn"][name](x, g, out)
    torch.testing.assert_close(out, torch.gather(x, 1, g % n).sum(1), rtol=1e-4, atol=1e-3)
    g[rows - 1, n // 3] = n + 5
    with pytest.raises(IndexError, match=bounds_error(n + 5, n).replace("k_\\w+", name)):
        built["fn"][name](x, g, out)


def test_only_kernels_with_binds_check(built: dict) -> None:
    plain = built["src"]["plain"]
    assert plain.meta == {"nargs": 2}
    assert "sdk_err" not in plain.source and 'extern "C" void plain(' in plain.source
    for name in ("emb_rows", "emb_col", "gather_sum_rows"):
        src = built["src"][name]
        assert src.meta["index_checks"] is True
        assert f'extern "C" int64_t {name}(' in src.source
    # a unit without checking kernels has no index-check helpers (nor their export)
    assert "sdk_index_error" not in render.TARGET.unit([plain])
    unit = render.TARGET.unit(list(built["src"].values()))
    assert unit.count(render.TAKE_INDEX_ERROR) == 1
    # the plain launcher is the lean one (one ctypes call, no error check)
    assert built["fn"]["plain"].__name__ == "launch"
    assert built["fn"]["emb_rows"].__name__ == "checked_launch"


def test_bind_outside_simd_is_a_branch_inside_is_a_reduction(built: dict) -> None:
    rows = built["src"]["emb_rows"].source
    assert "sdk_checked_index(sdk_err," in rows and "reduction(max:" not in rows
    col = built["src"]["emb_col"].source
    assert re.search(r"#pragma omp simd reduction\(max:sdk_bad0\)", col)
    assert "sdk_checked_index" not in col


def test_index_checked_loops_vectorize(built: dict, tmp_path: Path) -> None:
    """gcc vectorizes every ``omp simd`` loop of the checking kernels, the gathers
    with the bind inside the loop included."""
    srcs = [built["src"][k.name] for k in KERNELS]
    unit = render.TARGET.unit(srcs)
    path = tmp_path / "unit.cpp"
    path.write_text(unit)
    flags = [f for f in toolchain.default_flags() if f not in ("-shared", "-fPIC")]
    cmd = [
        sdk.toolchain.find_compiler(toolchain.LANGUAGE),
        *flags,
        "-fopt-info-vec-optimized",
        "-S",
        "-o",
        str(tmp_path / "unit.s"),
        str(path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    vectorized = {
        int(m.group(1))
        for m in re.finditer(r"unit\.cpp:(\d+):\d+: optimized: loop vectorized", proc.stderr)
    }
    lines = unit.splitlines()
    missing, loops = [], 0
    for i, ln in enumerate(lines):
        if ln.strip().startswith("#pragma omp simd"):
            loops += 1
            indent = ln[: len(ln) - len(ln.lstrip())]
            end = lines.index(indent + "}", i)
            if not any(i + 1 <= n <= end + 1 for n in vectorized):
                missing.append(lines[i + 1].strip())
    assert loops >= len(KERNELS)
    assert not missing, missing


def test_index_error_slot_is_thread_local_and_exported(built: dict) -> None:
    unit = render.TARGET.unit(list(built["src"].values()))
    assert re.search(r"static thread_local int64_t sdk_index_error_slot\[3\];", unit)
    assert 'extern "C" int64_t sdk_take_index_error(int64_t* out)' in unit


def test_negative_indices_are_out_of_range_where_eager_says_so():
    """Only ``x[idx]`` counts from the end; embedding, gather and index_select raise."""
    w = torch.randn(10, 4)
    idx = torch.tensor([1, -1])
    with pytest.raises(IndexError):
        torch.compile(lambda i: torch.nn.functional.embedding(i, w), backend="sdk:cpu_cpp")(idx)
    with pytest.raises(IndexError):
        torch.compile(lambda i: torch.index_select(w, 0, i), backend="sdk:cpu_cpp")(idx)
    torch.testing.assert_close(
        torch.compile(lambda i: w[i] * 1, backend="sdk:cpu_cpp")(idx), w[idx]
    )


def test_computed_index_proven_in_range_is_not_checked() -> None:
    """An index computed by integer ops whose bounds prove it inside its buffer (a pooling
    window's row) is read as is; one that can reach past the buffer is checked."""
    proven = render.render_kernel(window_kernel(0, "cpu"))
    assert "sdk_checked_index" not in proven.source and "sdk_clamp_index" not in proven.source
    assert not proven.meta.get("index_checks")
    assert render.render_kernel(window_kernel(1, "cpu")).meta["index_checks"] is True
