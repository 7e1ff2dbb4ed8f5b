"""A machine without a working C++ compiler (issue 47).

A process with a compiler fills fresh caches (the SDK's, torch's AOTAutograd cache) with a
small MLP's training step; later processes run it with no compiler (``CXX`` naming no file,
``PATH`` holding none) or a broken one. What was compiled runs from the caches, what was not
runs in ATen with one warning, and ``sdk.explain`` says why, each reason once.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tests import fresh

#: The training step, in a process of its own: ``argv[1]`` "same" or "other" (its head
#: computes something else: those graphs are not in the cache); ``argv[2]``, if given, a file
#: to load MegaCache artifacts from first ("load:PATH") or to save them to after ("save:PATH").
#: Prints its warnings and reports as one JSON line, then the report's text.
STEP = textwrap.dedent(
    """
    import copy, json, sys, warnings
    import torch, sdk
    warnings.simplefilter("always")
    other = sys.argv[1] == "other"
    artifacts = sys.argv[2] if len(sys.argv) > 2 else ""
    if artifacts.startswith("load:"):
        with open(artifacts[5:], "rb") as f:
            assert torch.compiler.load_cache_artifacts(f.read()) is not None
    torch.manual_seed(0)
    body = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU()
    )
    head = torch.nn.Linear(32, 8)

    def step(body, head, x):
        h = body(x) * 2
        torch._dynamo.graph_break()  # two Dynamo graphs: the body's and the head's
        out = head(h)
        out = torch.tanh(out) if other else out.sigmoid()
        return out.square().mean()

    x = torch.randn(4, 16)
    eager_body, eager_head = copy.deepcopy(body), copy.deepcopy(head)
    want = step(eager_body, eager_head, x)
    want.backward()
    with warnings.catch_warnings(record=True) as caught:
        with sdk.collect_reports() as report:
            got = torch.compile(step, backend="sdk:cpu_cpp")(body, head, x)
            got.backward()
    torch.testing.assert_close(got, want)
    for p, q in zip([*body.parameters(), *head.parameters()],
                    [*eager_body.parameters(), *eager_head.parameters()]):
        torch.testing.assert_close(p.grad, q.grad)
    if artifacts.startswith("save:"):
        with open(artifacts[5:], "wb") as f:
            f.write(torch.compiler.save_cache_artifacts()[0])
    print(json.dumps({
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "graphs": [
            {"name": g.name, "cache": g.cache, "kernels": len(g.kernels),
             "fallbacks": [f.reason for f in g.fallbacks]}
            for g in report.graphs
        ],
    }))
    print(report, flush=True)
    # done: exit without the interpreter's last collections over all that torch made (about
    # 1 s of the process); exit handlers still run
    import gc
    gc.freeze()
    """
)


def _run(script: str, env: dict[str, str], *args: str) -> tuple[dict, str]:
    # one OpenMP thread, as tests/fresh.py's server has: the child forks from it
    proc = fresh.run(
        [sys.executable, "-c", script, *args], env={**env, **fresh.SERVER_ENV_SET}, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    first, _, rest = proc.stdout.partition("\n")
    return json.loads(first), rest


def _caches(root: Path) -> dict[str, str]:
    return {
        "SDK_CACHE_DIR": str(root / "sdk"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "SDK_GRAPH_CACHE": "1",
    }


def _no_compiler(tmp_path: Path) -> dict[str, str]:
    """``CXX`` names a file that does not exist and ``PATH`` holds only an empty directory:
    :func:`sdk.toolchain.find_compiler` finds nothing."""
    empty = tmp_path / "bin"
    empty.mkdir()
    return {"CXX": str(tmp_path / "no-such-g++"), "PATH": str(empty)}


#: the file, in :func:`warm`'s directory, of the MegaCache artifacts its process saved
ARTIFACTS = "artifacts.bin"


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Caches filled by the training step in a process with a compiler, and the MegaCache
    artifacts that process saved (``ARTIFACTS`` in it; the caches' copies carry it along)."""
    root = tmp_path_factory.mktemp("warm")
    _run(STEP, {**os.environ, **_caches(root)}, "same", f"save:{root / ARTIFACTS}")
    return root


def _copy(warm: Path, tmp_path: Path) -> Path:
    """A copy of the warm caches for one test (a later process may write to them)."""
    root = tmp_path / "caches"
    shutil.copytree(warm, root, symlinks=True)
    return root


def test_cached_programs_run_without_a_compiler(warm: Path, tmp_path: Path) -> None:
    """Every program is in the cache: the step runs compiled, matches eager, and nothing
    warns (the native runner is cached too)."""
    root = _copy(warm, tmp_path)
    out, text = _run(STEP, {**os.environ, **_caches(root), **_no_compiler(tmp_path)}, "same")
    assert out["warnings"] == [], text
    graphs = out["graphs"]
    assert len(graphs) == 4, text  # two Dynamo graphs, a forward and a backward each
    assert all(not g["fallbacks"] for g in graphs), text
    assert sum(g["kernels"] for g in graphs) >= 3, text
    assert all(g["cache"] == "hit" for g in graphs if g["kernels"]), text


def test_a_graph_not_in_the_cache_runs_in_aten_with_one_warning(warm: Path, tmp_path: Path) -> None:
    """The head differs from the one cached: the body's graphs run their cached programs,
    the head's run in ATen; one warning names the compile that could not be done and why,
    and the report gives each of the head's graphs that reason."""
    root = _copy(warm, tmp_path)
    out, text = _run(STEP, {**os.environ, **_caches(root), **_no_compiler(tmp_path)}, "other")
    assert len(out["warnings"]) == 1, out["warnings"]
    warning = out["warnings"][0]
    assert warning.startswith("PluginFallbackWarning"), warning
    assert "g1_forward" in warning and "no-such-g++" in warning, warning
    by_name = {g["name"]: g for g in out["graphs"]}
    assert set(by_name) == {"g0_forward", "g0_backward", "g1_forward", "g1_backward"}, text
    for name in ("g0_forward", "g0_backward"):
        assert not by_name[name]["fallbacks"], text
    assert by_name["g0_backward"]["kernels"] and by_name["g0_backward"]["cache"] == "hit", text
    for name in ("g1_forward", "g1_backward"):
        reasons = set(by_name[name]["fallbacks"])
        assert len(reasons) == 1, text
        assert "cannot compile" in reasons.pop(), text
    assert text.count("no-such-g++") <= 2, text  # the reason once per graph at most


def test_programs_received_through_mega_cache_run_without_a_compiler(
    warm: Path, tmp_path: Path
) -> None:
    """``save_cache_artifacts()`` carries the kernels' libraries and the plugin's cache key
    with the programs: a machine with empty caches and no compiler (of the same CPU) that
    loads them runs the step compiled, without a warning. (The sender is :func:`warm`'s
    process, which saved them.)"""
    blob = warm / ARTIFACTS
    env = {**os.environ, **_caches(tmp_path / "receiver"), **_no_compiler(tmp_path)}
    out, text = _run(STEP, env, "same", f"load:{blob}")
    assert out["warnings"] == [], text
    assert all(not g["fallbacks"] for g in out["graphs"]), text
    assert sum(g["kernels"] for g in out["graphs"]) >= 3, text
    assert all(g["cache"] == "hit" for g in out["graphs"] if g["kernels"]), text
