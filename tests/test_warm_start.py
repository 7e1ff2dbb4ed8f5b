"""Warm starts (core/warm.py): a later process skips AOTAutograd and the SDK's compile through
torch's AOTAutograd cache, with results bit-equal to the cold process's; MegaCache carries the
SDK's entries to a machine with empty caches; a directory others can write is refused; a
recipe whose programs are gone is rebuilt, not trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import sdk
from sdk.core import graph_cache, warm

CHILD = textwrap.dedent(
    r"""
    import json, os, sys
    import torch
    import sdk  # (registers the SDK's MegaCache entries: nothing else of the SDK imported)

    mode, out = sys.argv[1], sys.argv[2]
    if mode == "load":  # a machine with empty caches, given the first process's artifacts
        with open(os.environ["ARTIFACTS"], "rb") as f:
            assert torch.compiler.load_cache_artifacts(f.read()) is not None

    from sdk.core import pipeline
    from sdk.core.adapters import torch_private as tp
    from torch._dynamo.utils import compilation_time_metrics, counters

    def traced():  # frames Dynamo has traced in this process (those it skips not counted)
        return len(compilation_time_metrics.get("_compile.compile_inner", ()))

    built = []
    real = tp._default_decompositions
    tp._default_decompositions = lambda: built.append(1) or real()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32),
        torch.nn.BatchNorm1d(32),  # its running statistics: written by the program's kernels
        torch.nn.GELU(),
        torch.nn.LayerNorm(32),
        torch.nn.Linear(32, 4),
    )
    x = torch.randn(8, 16)

    STEP = (
        "def step(x):\n"
        "    loss = model(x).square().mean()\n"
        "    loss.backward()  # inside the compiled function, as training loops do\n"
        "    return loss\n"
    )

    def make_step():  # a function of its own code object, which Dynamo has not seen
        env = {"model": model}
        exec(STEP, env)
        return env["step"]

    # the frames Dynamo traces for this step with no compiler at all (the eager backend):
    # the SDK's compilers must add none (Dynamo tracing a backward compiler adds some)
    frames = traced()
    torch.compile(make_step(), backend="eager")(x)
    eager_frames = traced() - frames
    for p in model.parameters():
        p.grad = None
    step = make_step()

    reports = []
    token = pipeline.collect_reports(reports)
    frames = traced()
    loss = torch.compile(step, backend="sdk:cpu_cpp")(x)
    sdk_frames = traced() - frames
    pipeline.stop_collecting(token)
    torch.save([loss.detach(), *(p.grad for p in model.parameters()), *model.buffers()], out)
    info = {
        "warm": {r.kind: r.warm for r in reports},
        "cache": {r.kind: r.cache for r in reports},
        "aot": dict(counters["aot_autograd"]),
        "decompositions_built": len(built),
        "sdk_frames": sdk_frames,
        "eager_frames": eager_frames,
    }
    if mode == "cold":
        artifacts = torch.compiler.save_cache_artifacts()
        with open(os.environ["ARTIFACTS"], "wb") as f:
            f.write(artifacts[0])
        info["artifacts"] = {
            kind: len(getattr(artifacts[1], f"{kind}_artifacts"))
            for kind in ("aot_autograd", "sdk_programs")
        }
    print("INFO " + json.dumps(info))
    """
)


def _run(tmp_path, mode, sdk_dir, torch_dir):
    out = tmp_path / f"{mode}.pt"
    env = {
        **os.environ,
        "SDK_CACHE_DIR": str(sdk_dir),
        "TORCHINDUCTOR_CACHE_DIR": str(torch_dir),
        "SDK_GRAPH_CACHE": "1",
        "ARTIFACTS": str(tmp_path / "artifacts.bin"),
    }
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run(
        [sys.executable, str(script), mode, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("INFO "))
    return json.loads(line[5:]), torch.load(out)


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    """A cold process, a warm one on its caches, and one on empty caches loaded with the cold
    process's MegaCache artifacts."""
    tmp = tmp_path_factory.mktemp("warm")
    first = (tmp / "sdk-cache", tmp / "inductor")
    cold = _run(tmp, "cold", *first)
    warm_ = _run(tmp, "warm", *first)
    shipped = _run(tmp, "load", tmp / "sdk-cache2", tmp / "inductor2")
    return cold, warm_, shipped


def _bit_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y), (x, y)


def test_a_cold_process_compiles_and_torch_stores_the_result(processes):
    (info, _), _, _ = processes
    assert info["warm"] == {"forward": "miss", "backward": "miss"}, info
    assert info["aot"].get("autograd_cache_saved") == 1, info
    assert info["decompositions_built"] == 1


def test_a_warm_process_skips_aotautograd_and_is_bit_equal(processes):
    (_, cold), (info, warm_), _ = processes
    assert info["warm"] == {"forward": "hit", "backward": "hit"}, info
    assert info["cache"] == {"forward": "hit", "backward": "hit"}, info
    assert info["aot"].get("autograd_cache_hit") == 1, info
    assert info["decompositions_built"] == 0, "a hit builds no decomposition table"
    _bit_equal(cold, warm_)


def test_the_backward_compiler_is_not_traced_by_dynamo(processes):
    (info, _), (warm_info, _), _ = processes
    # (torch 2.11's eager backend traces one frame more than the SDK's compile does)
    assert info["sdk_frames"] <= info["eager_frames"], info
    assert warm_info["sdk_frames"] <= warm_info["eager_frames"], warm_info


def test_mega_cache_ships_a_warm_start_to_empty_caches(processes):
    (cold_info, cold), _, (info, shipped) = processes
    assert cold_info["artifacts"]["aot_autograd"] >= 1, cold_info
    # forward and backward: their programs, and their recipes' digests
    assert cold_info["artifacts"]["sdk_programs"] == 4, cold_info
    assert info["warm"] == {"forward": "hit", "backward": "hit"}, info
    assert info["cache"] == {"forward": "hit", "backward": "hit"}, info
    _bit_equal(cold, shipped)


# -- in-process: the caches' rules -----------------------------------------------------


@pytest.fixture
def caches(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    return tmp_path


def _train(**options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x = torch.randn(5, 6)

    def step(x):
        loss = model(x).sum()
        loss.backward()
        return loss.detach()

    torch._dynamo.reset()
    report = sdk.explain(step, x, backend="sdk:cpu_cpp", **options)
    return report, [p.grad.clone() for p in model.parameters()]


def test_a_program_gone_from_the_sdk_cache_is_rebuilt_under_the_recipes_key(caches):
    first, grads = _train()
    assert _states(first) == {("miss", "stored")}, str(first)
    assert graph_cache.clear("programs") == len(first.graphs)
    again, grads2 = _train()
    # torch's entries hit; their programs are built again from the stored ATen graphs
    assert _states(again) == {("hit", "stored")}, str(again)
    third, grads3 = _train()
    assert _states(third) == {("hit", "hit")}, str(third)
    _bit_equal(grads, grads2)
    _bit_equal(grads, grads3)


def _states(report):
    return {(g.warm, g.cache) for g in report.graphs}


def test_other_options_are_another_entry(caches):
    _train()
    other, _ = _train(fusion=False)
    assert {g.warm for g in other.graphs} == {"miss"}, str(other)


def test_a_torch_cache_directory_others_can_write_is_refused(caches):
    shared = caches / "inductor"
    (shared / "aotautograd").mkdir(parents=True)
    os.chmod(shared / "aotautograd", 0o777)
    warm._refused.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report, grads = _train()
    assert [str(w.message) for w in seen if issubclass(w.category, sdk.CacheDirWarning)], [
        str(w.message) for w in seen
    ]
    assert all(g.warm.startswith("off: torch's AOTAutograd cache directory") for g in report.graphs)
    assert not any((shared / "aotautograd").iterdir()), "nothing stored there"
    assert all(torch.isfinite(g).all() for g in grads)


def test_the_cache_off_keeps_torch_s_cache_off(caches):
    report, _ = _train(cache=False)
    assert all(g.warm.startswith("off") for g in report.graphs), str(report)


# -- what is read back from torch's directory is verified -----------------------------------

FLIP_CHILD = textwrap.dedent(
    r"""
    import json, sys
    import torch
    import sdk
    from sdk.core import pipeline, warm

    graphs = []  # the pickled ATen graphs the SDK puts in torch's entries
    real = warm.Recipe.freeze

    def freeze(self, gm):
        state = real(self, gm)
        graphs.append(state["graph"].hex())
        return state

    warm.Recipe.freeze = freeze

    def f(x, y):
        return torch.relu(x) * 2.0 + y

    torch.manual_seed(0)
    base, y = torch.randn(64 * 32 + 1), torch.randn(64, 32)
    # the same sizes and strides (Dynamo's guards hold, torch's entry hits), another offset:
    # a new layout, whose program is built from the stored ATen graph
    x = base[:-1].view(64, 32) if sys.argv[1] == "cold" else base[1:].view(64, 32)
    reports = []
    token = pipeline.collect_reports(reports)
    got = torch.compile(f, backend="sdk:cpu_cpp")(x, y)
    pipeline.stop_collecting(token)
    print("INFO " + json.dumps({
        "warm": [r.warm for r in reports],
        "max_error": (got - f(x, y)).abs().max().item(),
        "graphs": graphs,
    }))
    """
)


def _flip_run(tmp_path, mode):
    env = {
        **os.environ,
        "SDK_CACHE_DIR": str(tmp_path / "sdk"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "SDK_GRAPH_CACHE": "1",
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", FLIP_CHILD, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("INFO "))
    return json.loads(line[5:])


def test_a_flipped_bit_in_the_stored_aten_graph_is_a_miss_not_a_wrong_result(tmp_path):
    cold = _flip_run(tmp_path, "cold")
    assert cold["warm"] == ["miss"] and cold["max_error"] == 0, cold
    (graph,) = (bytes.fromhex(g) for g in cold["graphs"])
    assert graph.count(b"2.0") == 1, "the constant of `* 2.0`, in the graph's code"
    flipped = graph.replace(b"2.0", bytes([ord("2") ^ 1]) + b".0")  # one bit: `* 3.0`
    entries = [
        p
        for p in (tmp_path / "inductor" / "aotautograd").rglob("*")
        if p.is_file() and graph in p.read_bytes()
    ]
    assert len(entries) == 1, entries
    entries[0].write_bytes(entries[0].read_bytes().replace(graph, flipped))
    warm_ = _flip_run(tmp_path, "warm")  # a new layout: the variant is built from the graph
    assert warm_["max_error"] < 1e-6, warm_
    assert warm_["warm"] == ["miss"], warm_  # compiled afresh, not served from what was read
