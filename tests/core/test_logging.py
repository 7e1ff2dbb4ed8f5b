"""``TORCH_LOGS=sdk``: one INFO line per compiled graph (plugin, kernels, library calls,
fallbacks with their reasons, the graph cache, a chain's partitions); ``+sdk``: the compile's
stages at DEBUG; unset: nothing. Run in fresh processes, since torch reads ``TORCH_LOGS`` at
import, in both import orders (``import sdk`` first, which registers the name before torch
parses the variable, and ``import torch`` first)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

import sdk

SCRIPT = """
import sys
if sys.argv[1] == "torch-first":
    import torch
import sdk
import torch

def f(x):
    return torch.lgamma(x.sin()) + 1

out = torch.compile(f, backend="sdk:cpu_cpp")(torch.ones(8))
torch.testing.assert_close(out, f(torch.ones(8)))
print("ran")
"""

#: an op cpu_cpp has no lowering for: it runs through ATen, with a reason
FALLBACK_OP = "aten.lgamma.default"
#: the stages ``+sdk`` times (after "capture", the Dynamo graph received; the build stages
#: of core/build_stages through their inspection hook)
STAGES = ("aot", "passes", "lower", "schedule", "render", "compile", "measure", "program", "wrap")


def fn(x):
    return torch.lgamma(x.sin()) + 1


def _run(tmp_path, logs: str | None, order: str = "sdk-first") -> str:
    """The stderr of SCRIPT run with ``TORCH_LOGS=logs`` (None: unset), caching in
    ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_LOGS")}
    env.update(
        SDK_CACHE_DIR=str(tmp_path / "sdk"),
        SDK_GRAPH_CACHE="1",
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )
    if logs is not None:
        env["TORCH_LOGS"] = logs
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, order],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ran", proc.stderr[-3000:]
    return proc.stderr


def _graph_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "] graph g" in line]


def test_torch_logs_sdk_shows_each_graph_its_fallbacks_and_the_cache(tmp_path):
    # what explain reports for this graph is what the line must say
    report = sdk.explain(fn, torch.ones(8))
    [graph] = report.graphs
    assert any(f.op == FALLBACK_OP for f in graph.fallbacks), str(report)

    cold = _run(tmp_path, "+sdk")  # import sdk first, cold caches
    [line] = _graph_lines(cold)
    assert line.startswith("I"), line  # INFO
    assert f"by sdk:{graph.plugin}" in line, line
    assert f"{len(graph.kernels)} kernel" in line, line
    assert f"{len(graph.externs)} library call" in line, line
    for f in graph.fallbacks:
        assert f.op in line and f.reason in line, (f, line)
    assert "graph cache miss (stored)" in line, line
    # +sdk: each stage, at DEBUG, with its time
    debug = [s for s in cold.splitlines() if s.startswith("V")]
    assert any("] capture g0: Dynamo graph" in s for s in debug), cold
    for stage in STAGES:
        assert any(f"] {stage} g0" in s and s.endswith("s)") for s in debug), (stage, cold)

    warm = _run(tmp_path, "sdk", order="torch-first")  # import torch first, warm caches
    [line] = _graph_lines(warm)
    assert "graph cache hit" in line and FALLBACK_OP in line, line
    assert not [s for s in warm.splitlines() if s.startswith("V")], warm  # INFO only

    quiet = _run(tmp_path, None)
    assert not _graph_lines(quiet) and "sdk" not in quiet, quiet


def test_torch_logs_sdk_does_not_make_import_sdk_import_the_sdk_whole():
    """torch takes a log name it does not know for a module and imports it with its
    subpackages (Dynamo and the plugins with them): ``import sdk`` registers the name first."""
    code = (
        "import sys, sdk, logging\n"
        "print(sorted(m for m in ('torch._dynamo', 'sdk.core.pipeline') if m in sys.modules))\n"
        "print(logging.getLogger('sdk').getEffectiveLevel())\n"
    )
    env = {**os.environ, "TORCH_LOGS": "+sdk,-dynamo"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["[]", str(logging.DEBUG)], out.stdout + out.stderr


def test_set_logs_takes_the_sdk_name():
    code = (
        "import logging, sdk, torch\n"
        "torch._logging.set_logs(modules={'sdk': logging.INFO})\n"
        "logging.getLogger('sdk.core.pipeline').info('one line')\n"
        "logging.getLogger('sdk.core.pipeline').debug('not this one')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_LOGS")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "one line" in out.stderr and "not this one" not in out.stderr, out.stderr


def _split_line(chain_world, caplog) -> tuple[sdk.ExplainReport, list[str]]:
    chain_world()
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    with caplog.at_level(logging.INFO, logger="sdk"):
        report = sdk.explain(
            lambda x, w: (torch.tanh(x @ w) * 2 + 1).sin(),
            x,
            w,
            backend=sdk.backend("picky", chain=["cpu_cpp"]),
        )
    return report, [r.getMessage() for r in caplog.records if r.name.startswith("sdk.")]


def test_a_chain_line_names_each_partition_and_who_compiled_it(chain_world, caplog):
    report, lines = _split_line(chain_world, caplog)
    [split] = [g for g in report.graphs if g.partitions]
    [line] = [s for s in lines if s.startswith(f"graph {split.name} ")]
    assert "split by the chain of sdk:picky" in line, line
    for p in split.partitions:
        assert f"{p.name} sdk:{p.plugin}" in line, (p, line)
    # each partition a plugin compiled has a line of its own, as explain reports it
    for g in report.graphs:
        assert any(s.startswith(f"graph {g.name} ") for s in lines), (g.name, lines)


@pytest.fixture
def chain_world(make_plugin, fake_dist, use_registry):
    """picky (cpu_cpp's codegen refusing tanh) installed."""
    from tests.core.test_chain import PICKY

    def make():
        picky = make_plugin(PICKY, name="picky")
        use_registry(fake_dist("acme-chain", {"picky": picky}))

    return make
