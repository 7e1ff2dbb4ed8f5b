"""Kernels of symbolic sizes in cuda_triton's C shim (``native.SymNative``): the runner
launches them without Python, the shim computing each launch's grid, its variant (the
kernel or its persistent alternative) and Triton's specialization key from the size
arguments.

What the shim computes is checked here against the Python launcher's own expressions, on any
machine (the shim's library is built without CUDA); its launches are checked on a GPU by
tests/gpu/test_runner_gpu.py.
"""

from __future__ import annotations

import math
import os
import random

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")
pytest.importorskip("numpy")

from sdk.plugins.cuda_triton import launch, native


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path))
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _shim_library():
    try:
        return native.library()
    except Exception as exc:  # noqa: BLE001 - a machine without a C compiler
        pytest.skip(f"the shim cannot be built here: {exc}")


def _sources(monkeypatch, fn, *shapes) -> list:
    """The kernel sources of symbolic sizes that ``fn`` compiled with ``dynamic=True`` over
    inputs of ``shapes`` (one call each), as the launcher bound them."""
    seen = []
    real = launch._bind

    def record(src, config=None, **kw):
        seen.append(src)
        return real(src, config, **kw)

    monkeypatch.setattr(launch, "_bind", record)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="sdk:cuda_triton", dynamic=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for shape in shapes:
        x = torch.randn(shape, device=dev)
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-5)
    return [s for s in seen if s.meta.get("sizes")]


def _block(x: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.gelu(x * 1.5 + 1.0)
    y = torch.softmax(h, -1) + torch.nn.functional.layer_norm(h, h.shape[-1:])
    return y[::2] * y.sum(0)


def _sizes_to_try(n: int, rng: random.Random) -> list[list[int]]:
    edges = [2, 3, 15, 16, 17, 31, 32, 1023, 1024, 1025, 2**31 - 1, 2**31, 3 * 2**33]
    out = [[e] * n for e in edges]
    out += [[rng.choice(edges) for _ in range(n)] for _ in range(40)]
    out += [[rng.randint(2, 5000) for _ in range(n)] for _ in range(200)]
    return out


def test_the_shim_plans_each_launch_as_the_python_launcher_does(monkeypatch):
    """For every kernel of symbolic sizes of a block (pointwise, softmax and layer norm rows,
    a strided view, a column sum), the shim's grid, variant and key equal the Python
    launcher's expressions at sizes from 2 to past 2**31; where the Python value would
    overflow int64 or divide by zero, the shim leaves the launch to Python."""
    _shim_library()
    sources = _sources(monkeypatch, _block, (6, 40), (9, 300))
    assert sources, "the block compiled no kernel of symbolic sizes"
    assert any(s.meta.get("alt") for s in sources), "no kernel with a persistent alternative"
    rng = random.Random(0)
    for src in sources:
        meta = src.meta
        consts, _opts = launch._split_config(meta, meta["config"], meta["constexprs"])
        grids, when = launch.size_programs(meta, consts)
        names = list(meta["sizes"])
        sym = native.SymNative(src.entry, len(meta["args"]), names, grids, when)
        assert sym.refused in (None, "no shim"), (src.name, sym.refused)
        key_src = launch._spec_key_src(names)
        for sizes in _sizes_to_try(len(names), rng):
            env = dict(zip(names, sizes, strict=True))
            variant = int(bool(eval(when, {}, env))) if when else 0  # noqa: S307 - the renderer's
            grid = tuple(eval(g, {}, env) for g in grids[variant])  # noqa: S307
            planned = sym.plan(sizes)
            if any(abs(g) >= 2**63 for g in grid):
                assert planned is None, (src.name, sizes)
                continue
            if planned is None:  # only where an intermediate value can leave int64
                assert math.prod(sizes) * 2**16 >= 2**63, (src.name, sizes)
                continue
            assert planned == (variant, grid, native.spec_key(sizes)), (src.name, sizes, planned)
            # equal keys: what Triton specializes a size on (divisibility by 16, 32 or 64
            # bits) is the same; and sizes the Python launcher's key merges, the shim's does
            other = [rng.choice([2, 16, 17, 32, 2**31, 3 * 2**33]) for _ in names]
            same = native.spec_key(sizes) == native.spec_key(other)
            triton = [[v % 16 == 0 for v in s] for s in (sizes, other)]
            assert same == ([*triton[0], max(sizes) >= 2**31] == [*triton[1], max(other) >= 2**31])
            if eval(key_src, {}, env) == eval(  # noqa: S307
                key_src, {}, dict(zip(names, other, strict=True))
            ):
                assert same


def test_size_programs_are_python_arithmetic():
    """The shim's programs follow Python's integer arithmetic (floor division and modulo
    towards -inf, min and max, conditions), and anything else is refused, naming it."""
    _shim_library()
    names = ["s0", "s1"]
    cases = [
        "-(-(s0 * 3 + 1) // 128)",
        "(s0 - s1) // 7",
        "(s0 - s1) % 7",
        "s0 % -5",
        "min(s0, s1, 77) - max(s1, 9)",
        "+s0 - -s1",
    ]
    grid = [cases[0], cases[1], cases[2]]
    alt = [cases[3], cases[4], cases[5]]
    when = "s0 <= 1024 and s1 > 3 or s0 == s1"
    sym = native.SymNative("k", 1, names, [grid, alt], when)
    assert sym.refused in (None, "no shim")
    rng = random.Random(1)
    for _ in range(300):
        sizes = [rng.randint(-3000, 3000), rng.randint(-3000, 3000)]
        env = dict(zip(names, sizes, strict=True))
        variant = int(bool(eval(when, {}, env)))  # noqa: S307
        want = tuple(eval(g, {}, env) for g in (grid, alt)[variant])  # noqa: S307
        got = sym.plan(sizes)
        assert got is not None and got[:2] == (variant, want), (sizes, got)
    # a division by zero and an overflow are left to Python (which raises or launches)
    assert native.SymNative("k", 1, names, [["s0 // s1", "1", "1"]]).plan([4, 0]) is None
    assert native.SymNative("k", 1, names, [["s0 * s1", "1", "1"]]).plan([2**62, 4]) is None
    for bad in ("s0 / 2", "s0 ** 2", "abs(s0)", "s0.real", "s2 + 1", "1.5", "s0 < 2"):
        with pytest.raises(ValueError, match="in "):
            native.program(bad, names)
    deep = "s1"
    for _ in range(native.SYM_DEPTH):
        deep = f"s0 + ({deep})"
    with pytest.raises(ValueError, match="stack"):
        native.program(deep, names)
    sym = native.SymNative("k", 1, names, [["s0 / 2", "1", "1"]])
    assert sym.entry is None and "s0 / 2" in sym.refused
