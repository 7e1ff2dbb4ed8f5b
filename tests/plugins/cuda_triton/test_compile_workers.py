"""The compile workers (``sdk.workers``: torch's compile worker pool) and cuda_triton's kernels
compiled in them (``.offline``), on any machine.

A worker cannot use a GPU, so the CUDA target a kernel compiles for is the caller's, given
with the job: here an H100's (sm_90), without a GPU. That the caller's own warm-up then finds
those kernels in Triton's cache, and compiles none again, is checked on a GPU by
tests/gpu/test_compile_workers_gpu.py.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from sdk import _config
from sdk.plugins.cuda_triton import launch, offline
from sdk.workers import CompileWorkers, default_workers
from tests.plugins_under_test import wait_for_workers


@pytest.fixture(scope="module")
def workers():
    """One pool for the module: a pool starts a sidecar that imports torch (seconds). Started
    without the interpreter, as on a GPU: Triton decides some of its own functions' kind when
    it is imported, in the sidecar, from TRITON_INTERPRET."""
    previous = _config.set_variables(SDK_COMPILE_WORKERS="2")
    pool = CompileWorkers()
    with _config.overridden(TRITON_INTERPRET=None):
        pool.start()
    wait_for_workers(pool)
    yield pool
    pool.shutdown()
    assert not pool.ready
    _config.set_variables(**previous)


def test_map_answers_in_order_with_each_failure_in_its_place(workers):
    got = workers.map(math.sqrt, [4.0, -1.0, 9.0])
    assert got[0] == 2.0 and got[2] == 3.0
    assert "math domain error" in str(got[1])  # the worker's exception, for that item only
    assert workers.map(os.getpid, []) == []


def test_a_worker_that_dies_fails_its_items_and_the_next_map_works(workers):
    """A job that kills its worker (a compiler crash) comes back as a failure, with a
    timeout as the backstop, never a hang; the sidecar starts new workers for what follows."""
    (died,) = workers.map(os._exit, [3], timeout=120)
    assert isinstance(died, BaseException) and not isinstance(died, TimeoutError), died
    assert workers.ready
    assert workers.map(abs, [-1, -2], timeout=120) == [1, 2]


def test_a_worker_sees_the_callers_variables_of_the_prefixes_at_each_map(workers, monkeypatch):
    monkeypatch.setenv("SDKTEST_A", "1")
    monkeypatch.setenv("SDKTEST_B", "2")
    assert workers.map(_config.variables_with, [("SDKTEST_",)], env_prefixes=("SDKTEST_",)) == [
        {"SDKTEST_A": "1", "SDKTEST_B": "2"}
    ]
    monkeypatch.delenv("SDKTEST_A")
    # unset here: unset there too, in whichever worker runs it
    assert (
        workers.map(_config.variables_with, [("SDKTEST_",)] * 4, env_prefixes=("SDKTEST_",))
        == [{"SDKTEST_B": "2"}] * 4
    )


@pytest.mark.parametrize("asked", ["0", "1"])
def test_none_asked_for_is_no_pool_and_says_why(monkeypatch, asked):
    monkeypatch.setenv("SDK_COMPILE_WORKERS", asked)
    pool = CompileWorkers()
    pool.start()
    assert not pool.ready
    assert pool.map(abs, [1]) is None  # the caller compiles itself
    assert "SDK_COMPILE_WORKERS" in pool.why_not()


@pytest.mark.parametrize("asked", [None, "", "auto"])
def test_workers_are_on_by_default_one_per_cpu(monkeypatch, asked):
    if asked is None:
        monkeypatch.delenv("SDK_COMPILE_WORKERS", raising=False)
    else:
        monkeypatch.setenv("SDK_COMPILE_WORKERS", asked)
    auto = default_workers()
    assert 1 <= auto <= 32
    assert CompileWorkers().workers == (auto if auto > 1 else 0)


def test_workers_asked_for_later_start_then(monkeypatch):
    monkeypatch.setenv("SDK_COMPILE_WORKERS", "auto")
    auto = default_workers()
    assert CompileWorkers().workers == (auto if auto > 1 else 0)
    monkeypatch.setenv("SDK_COMPILE_WORKERS", "0")
    pool = CompileWorkers()
    pool.start()
    assert pool.why_not() is not None
    monkeypatch.setenv("SDK_COMPILE_WORKERS", "3")
    assert pool.workers == 3 and pool.why_not() is None  # nothing remembered of "none"


def test_workers_off_now_answer_none_to_a_started_pool(workers, monkeypatch):
    monkeypatch.setenv("SDK_COMPILE_WORKERS", "0")
    assert workers.map(abs, [1]) is None


def test_a_bad_worker_count_warns_naming_the_variable_and_the_fix(monkeypatch):
    """A compile goes on without workers (cuda_triton starts them from a hook, where an
    exception would be the plugin's fault), after one warning that says what to set."""
    monkeypatch.setenv("SDK_COMPILE_WORKERS", "lots")
    pool = CompileWorkers()
    with pytest.warns(RuntimeWarning, match=r"SDK_COMPILE_WORKERS is 'lots'.*Fix"):
        pool.start()
    pool.start()  # (once)
    assert pool.map(abs, [1]) is None
    assert "SDK_COMPILE_WORKERS is 'lots'" in pool.why_not()


SM90 = ("cuda", 90, 32)


def _kernels(monkeypatch) -> list[offline.Offline]:
    """The kernels cuda_triton binds for a training step of a small block (pointwise,
    reductions over rows and columns, their backward), as its launchers hand them over
    (``fn.offline``), each under a record key of its own (without a GPU, a kernel has
    none)."""
    bound = []
    real = launch._bind

    def record(src, config=None, **kw):
        fn = real(src, config, **kw)
        bound.extend(getattr(fn, "offline", ()))
        return fn

    monkeypatch.setattr(launch, "_bind", record)
    torch._dynamo.reset()

    def block(x, w):
        h = torch.nn.functional.gelu(x @ w)
        return (torch.softmax(h, -1) * h.sum(0)).sum()

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(24, 40, device=dev)
    w = torch.randn(40, 40, device=dev, requires_grad=True)
    torch.compile(block, backend="sdk:cuda_triton")(x, w).backward()
    assert len(bound) >= 3, bound
    unique = {repr(k[:5]): k for k in bound}.values()
    return [(*k[:5], f"record{i}") for i, k in enumerate(unique)]


def _specs(monkeypatch) -> list[offline.Spec]:
    """:func:`_kernels` as the caller hands them to the workers, for an sm_90 target."""
    from triton.backends.compiler import GPUTarget

    return [offline.Spec(*k[:5], GPUTarget(*SM90)) for k in _kernels(monkeypatch)]


def _cubins(cache: Path) -> set[str]:
    return {p.parent.name for p in cache.rglob("*.cubin")}


def test_kernels_compile_in_the_workers_for_the_callers_target(workers, monkeypatch, tmp_path):
    """Each kernel compiles in a worker into the Triton cache the caller names (its
    TRITON_CACHE_DIR at the map), as a cubin; the same kernels again are found there: no
    new cubin, the same hashes."""
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    gpu = torch.cuda.is_available()
    if not gpu:
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the caller renders under the interpreter
    specs = _specs(monkeypatch)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the workers compile for sm_90
    cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    first = workers.map(offline.compile_in_worker, specs, env_prefixes=offline.ENV_PREFIXES)
    assert all(isinstance(c, offline.Compiled) for c in first), first
    hashes = [c.hash for c in first]
    assert len(_cubins(cache)) == len(set(hashes)) == len(specs)
    again = workers.map(offline.compile_in_worker, specs, env_prefixes=offline.ENV_PREFIXES)
    assert [c.hash for c in again] == hashes
    assert len(_cubins(cache)) == len(specs)


def test_the_workers_answer_each_kernels_record_and_the_caller_keeps_it(
    workers, monkeypatch, tmp_path
):
    """What the caller of a GPU of sm_90 gets back (:func:`offline.compile_in_workers`): each
    kernel's record, its cubin and launch metadata as the shim launches it, with every
    pointer taken as aligned; stored under the kernel's record key, where a later bind of
    the kernel finds it. A record for another arch is not taken."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    from sdk import workers as workers_module
    from sdk.plugins.cuda_triton import records

    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernels = _kernels(monkeypatch)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(workers_module, "compile_workers", lambda: workers)
    # the caller's GPU, an H100, as the caller's Triton and torch would answer for it
    monkeypatch.setattr(driver, "_active", offline._Target(GPUTarget(*SM90)))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    before = dict(offline.WORKER_COMPILES)

    made = offline.compile_in_workers(kernels)

    assert set(made) == {k[5] for k in kernels}
    assert offline.WORKER_COMPILES["records"] - before["records"] == len(kernels)
    for _source, fn, dtypes, grid, _kw, key in kernels:
        rec = made[key]
        assert rec.arch == 90 and rec.grid == tuple(grid)
        assert rec.nargs == len(dtypes) and all(rec.aligned)
        assert rec.cubin.startswith(b"\x7fELF") and rec.threads % 32 == 0
        assert rec.name == fn
        assert records.load(key, 90) == rec  # stored: the next bind finds it
        assert records.load(key, 80) is None  # not for another arch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert offline.compile_in_workers(kernels) == {}  # sm_90 records on an sm_80 GPU
