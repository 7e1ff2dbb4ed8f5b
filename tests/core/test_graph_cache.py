"""The whole-graph cache (core/graph_cache.py): a compiled program stored on disk and rebuilt
in a later compile without lowering, scheduling or rendering; every result compared with
eager on fresh inputs; corrupt, foreign and stale entries are misses."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import sdk
from sdk.core import graph_cache
from sdk.plugins.cpu_cpp import render as cpp_render
from tests import fresh


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    # torch's AOTAutograd cache, which holds the recipes of warm starts (core.warm)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    return tmp_path / "cache"


@pytest.fixture
def renders(monkeypatch):
    calls = []
    real = cpp_render.render_kernel

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(cpp_render, "render_kernel", counting)
    return calls


def f(x, y):
    return (x * torch.sigmoid(y) + torch.tensor([1.0, -2.0, 3.0])).sum(-1).relu()


def _explain(fn, *args, **options):
    torch._dynamo.reset()
    return sdk.explain(fn, *args, backend="sdk:cpu_cpp", **options)


def _check(fn, compiled, *shapes):
    for _ in range(2):
        args = [torch.randn(*s) for s in shapes]
        torch.testing.assert_close(compiled(*args), fn(*args))


def test_a_second_compile_rebuilds_the_program_from_the_cache(cache_on, renders):
    first = _explain(f, torch.randn(4, 3), torch.randn(4, 3))
    assert [g.cache for g in first.graphs] == ["stored"], str(first)
    assert renders, "the first compile renders its kernels"
    renders.clear()
    second = _explain(f, torch.randn(4, 3), torch.randn(4, 3))
    assert [g.cache for g in second.graphs] == ["hit"], str(second)
    assert not renders, "a hit renders nothing"
    # the report is the first compile's, with the time that compile took (what the hit saved)
    assert [k.source for k in second.graphs[0].kernels] == [
        k.source for k in first.graphs[0].kernels
    ]
    cold = second.graphs[0].cold_compile_seconds
    assert 0 < cold <= first.graphs[0].compile_seconds, (cold, str(first))
    assert first.graphs[0].cold_compile_seconds == 0
    assert f"(cache hit; cold compile took {cold:.2f}s)" in str(second), str(second)
    torch._dynamo.reset()
    _check(f, torch.compile(f, backend="sdk:cpu_cpp"), (4, 3), (4, 3))


def test_training_graphs_hit_and_their_gradients_match_eager(cache_on, renders):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))

    def steps(compiled):
        for _ in range(2):
            x = torch.randn(5, 8)
            model.zero_grad()
            compiled(x).square().mean().backward()
            got = [p.grad.clone() for p in model.parameters()]
            model.zero_grad()
            model(x).square().mean().backward()
            for g, p in zip(got, model.parameters()):
                torch.testing.assert_close(g, p.grad)

    torch._dynamo.reset()
    steps(torch.compile(model, backend="sdk:cpu_cpp"))
    assert renders  # forward and backward kernels
    renders.clear()
    torch._dynamo.reset()
    steps(torch.compile(model, backend="sdk:cpu_cpp"))
    assert not renders


def test_other_options_or_layouts_miss(cache_on):
    _explain(f, torch.randn(4, 3), torch.randn(4, 3))
    report = _explain(f, torch.randn(4, 3), torch.randn(4, 3), fusion=False)
    assert [g.cache for g in report.graphs] == ["stored"]
    report = _explain(f, torch.randn(6, 3), torch.randn(6, 3))
    assert [g.cache for g in report.graphs] == ["stored"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign"])
def test_a_damaged_or_foreign_entry_is_a_miss_and_is_rebuilt(cache_on, damage):
    _explain(f, torch.randn(4, 3), torch.randn(4, 3))

    def g(x, y):
        return (x - y).abs().amax(-1)

    _explain(g, torch.randn(4, 3), torch.randn(4, 3))
    entries = sorted((cache_on / graph_cache.NAMESPACE).iterdir(), key=os.path.getmtime)
    assert len(entries) == 2
    target, other = entries
    data = target.read_bytes()
    if damage == "flip":
        data = data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:]
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = other.read_bytes()  # another graph's entry under this one's name
    target.write_bytes(data)
    report = _explain(f, torch.randn(4, 3), torch.randn(4, 3))
    assert [gr.cache for gr in report.graphs] == ["stored"], str(report)
    torch._dynamo.reset()
    _check(f, torch.compile(f, backend="sdk:cpu_cpp"), (4, 3), (4, 3))


def test_the_cache_is_off_by_option_and_by_environment(cache_on, monkeypatch):
    report = _explain(f, torch.randn(4, 3), torch.randn(4, 3), cache=False)
    assert [g.cache for g in report.graphs] == ["off"]
    monkeypatch.setenv("SDK_GRAPH_CACHE", "0")
    report = _explain(f, torch.randn(4, 3), torch.randn(4, 3))
    assert [g.cache for g in report.graphs] == ["off"]
    assert not (cache_on / graph_cache.NAMESPACE).exists() or not any(
        (cache_on / graph_cache.NAMESPACE).iterdir()
    )


def test_entries_hold_no_pickle(cache_on):
    _explain(f, torch.randn(4, 3), torch.randn(4, 3))
    (entry,) = (cache_on / graph_cache.NAMESPACE).iterdir()
    data = entry.read_bytes()
    assert b"\x80\x04\x95" not in data and b"\x80\x05\x95" not in data  # pickle protocols 4/5
    from sdk import _diskcache as cache

    pos = len(cache._MAGIC)
    key_len = int.from_bytes(data[pos : pos + 4], "little")
    key = data[pos + 4 : pos + 4 + key_len].decode()
    doc, blobs = graph_cache.unpack(cache._decode(data, key))
    assert doc["format"] == graph_cache.FORMAT and len(blobs) == 1  # the constant tensor


def test_a_second_process_hits(cache_on, tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent("""
        import torch, sdk
        def f(x, y):
            return (x * torch.sigmoid(y) + 1).sum(-1)
        x, y = torch.randn(4, 3), torch.randn(4, 3)
        r = sdk.explain(f, x, y, backend="sdk:cpu_cpp")
        torch.testing.assert_close(torch.compile(f, backend="sdk:cpu_cpp")(x, y), f(x, y))
        print("cache:", ",".join(g.cache for g in r.graphs), flush=True)
        # done: exit without the interpreter's last collections over all that torch made
        # (about 1 s of the process); exit handlers still run
        import gc
        gc.freeze()
    """)
    )
    env = fresh.one_thread(SDK_CACHE_DIR=str(cache_on), SDK_GRAPH_CACHE="1")
    runs = [fresh.run([sys.executable, str(script)], env=env, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    assert "cache: stored" in runs[0].stdout and "cache: hit" in runs[1].stdout


def test_cli_cache_info_and_clear(cache_on):
    _explain(f, torch.randn(4, 3), torch.randn(4, 3))
    env = fresh.one_thread(SDK_CACHE_DIR=str(cache_on))
    info = fresh.run([sys.executable, "-m", "sdk", "cache", "info"], env=env, timeout=120)
    assert info.returncode == 0, info.stderr
    assert str(cache_on) in info.stdout and graph_cache.NAMESPACE in info.stdout
    clear = fresh.run([sys.executable, "-m", "sdk", "cache", "clear"], env=env, timeout=120)
    assert clear.returncode == 0, clear.stderr
    assert not any((cache_on / graph_cache.NAMESPACE).iterdir())
    bad = fresh.run(
        [sys.executable, "-m", "sdk", "cache", "clear", "--namespace", "../x"], env=env, timeout=120
    )
    assert bad.returncode == 2 and "namespace" in bad.stderr


def test_cuda_triton_programs_hit_too(cache_on):
    pytest.importorskip("triton")
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("cuda_triton needs a GPU or TRITON_INTERPRET=1")
    dev = "cuda" if torch.cuda.is_available() else "cpu"

    def h(x, y):
        return (x * torch.sigmoid(y) - 1).sum(-1).relu()

    x, y = torch.randn(4, 3, device=dev), torch.randn(4, 3, device=dev)
    reports = []
    for _ in range(2):
        torch._dynamo.reset()
        reports.append(sdk.explain(h, x, y, backend="sdk:cuda_triton"))
    assert [[g.cache for g in r.graphs] for r in reports] == [["stored"], ["hit"]]
    torch._dynamo.reset()
    compiled = torch.compile(h, backend="sdk:cuda_triton")
    for _ in range(2):
        a, b = torch.randn(4, 3, device=dev), torch.randn(4, 3, device=dev)
        torch.testing.assert_close(compiled(a, b), h(a, b))


def test_a_plugin_without_a_cache_key_is_not_cached(cache_on, use_registry, monkeypatch):
    from importlib.metadata import EntryPoint

    from tests.conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "acme_vendor"))
    use_registry(EntryPoint("acme", "acme_sdk_plugin", "sdk.plugins"))
    report = _explain_with("sdk:acme", f, torch.randn(4, 3), torch.randn(4, 3))
    assert [g.cache for g in report.graphs] == ["off: sdk:acme does not implement sdk_cache_key"], (
        str(report)
    )


def _explain_with(backend, fn, *args):
    torch._dynamo.reset()
    return sdk.explain(fn, *args, backend=backend)


def test_a_symbolic_program_hits_and_serves_every_size(cache_on, renders):
    def g(x):
        return torch.softmax(x * 2, -1).sum(0)

    first = sdk.explain(g, torch.randn(5, 7), backend="sdk:cpu_cpp", dynamic=True)
    assert [(x.cache, x.sizes.split(":")[0]) for x in first.graphs] == [("stored", "symbolic")]
    renders.clear()
    second = sdk.explain(g, torch.randn(9, 11), backend="sdk:cpu_cpp", dynamic=True)
    assert [x.cache for x in second.graphs] == ["hit"], str(second)
    assert not renders
    torch._dynamo.reset()
    compiled = torch.compile(g, backend="sdk:cpu_cpp", dynamic=True)
    for n, m in ((3, 4), (17, 130), (6, 6)):
        x = torch.randn(n, m)
        torch.testing.assert_close(compiled(x), g(x))


def test_a_change_to_the_c_like_emitter_changes_every_key(monkeypatch):
    """cpu_cpp and the C-like plugins render with sdk.clike's emitter, not with their own
    sources (which their sdk_cache_key digests): the SDK's digest, part of every key, must
    see it change."""
    import sdk.clike.emit
    import sdk.clike.target

    before = graph_cache.sdk_digest.__wrapped__()
    real = Path.read_bytes
    for module in (sdk.clike.emit, sdk.clike.target):
        changed = Path(module.__file__).resolve()
        monkeypatch.setattr(
            Path,
            "read_bytes",
            lambda self, changed=changed: (
                real(self) + (b"\n# changed" if self.resolve() == changed else b"")
            ),
        )
        assert graph_cache.sdk_digest.__wrapped__() != before, module.__name__
    monkeypatch.setattr(Path, "read_bytes", real)
    assert graph_cache.sdk_digest.__wrapped__() == before


def test_a_recompile_under_the_opposite_guard_is_its_own_entry(cache_on):
    # buf[:x.size(0)]: Dynamo traces the slice with x's length under x.size(0) <= 10, with
    # buf's under the negation; both graphs have one code and one input layout. Each is
    # its own entry (the key holds the traced sizes): the second does not run the first's
    # program, which reads x's length of buf (its requirement would send such a call to a
    # program of its own sizes)
    buf = torch.arange(10.0)

    def fn(x):
        return x.sum() + buf[: x.shape[0]].sum() * 2

    f = torch.compile(fn, backend="sdk:cpu_cpp", dynamic=True)
    with sdk.collect_reports() as reports:
        for n in (4, 12, 6, 16):
            x = torch.randn(n, 3)
            torch.testing.assert_close(f(x), fn(x))
    first, second = reports.graphs[:2]
    assert (first.cache, second.cache) == ("stored", "stored"), [g.cache for g in reports.graphs]
    # each its own program: the slice's length from x, then from buf (another requirement)
    assert "requires" in first.sizes and "requires" in second.sizes
    assert first.sizes != second.sizes, (first.sizes, second.sizes)
