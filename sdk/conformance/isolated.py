"""``--sdk-isolate``: each check of the conformance suite in a pytest process of its own.

A plugin whose compiler or kernels crash the process (a segfault, an ``abort()``) would end
the whole run, and the summary with it. Isolated, the check runs in a child pytest (the same
plugins and options, ``--sdk-case`` selecting it by name) that sends its reports back as
pytest serializes them; a child that dies is that check's failure, named, with the signal
and the child's last output, and the run goes on with the next check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest

#: how much of a crashed child's output its failure quotes
TAIL_LINES = 30


def child_args(state: dict[str, Any], case: str, reports: str, ini: str) -> list[str]:
    """The child pytest's command line: the run's plugins and options, one case."""
    from sdk import _config as config

    # tee-sys: what the check prints reaches this process too (a crash loses pytest's capture)
    args = [sys.executable, "-m", "pytest", "-q", "--capture=tee-sys", "-c", ini]
    args += ["-p", "no:cacheprovider"]
    args += [f"--sdk-plugin={p}" for p in state["plugins"]]
    args += ["--sdk-compare=none", f"--sdk-opinfo={state['opinfo']}"]
    args += [f"--sdk-samples={state['samples']}", f"--sdk-case={case}"]
    args += [f"--sdk-case-reports={reports}", f"--rootdir={state['rootdir']}"]
    args += ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if state["device"]:
        args.append(f"--sdk-device={state['device']}")
    if config.variable("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "sdk.conformance.pytest_plugin"]
    return args


def run(item: pytest.Item, state: dict[str, Any]) -> list[pytest.TestReport]:
    """The reports of ``item`` run in a child pytest; a failed one where the child died."""
    config = item.config
    with tempfile.TemporaryDirectory(prefix="sdk-conformance-") as tmp:
        reports, ini = os.path.join(tmp, "reports.jsonl"), os.path.join(tmp, "pytest.ini")
        with open(ini, "w") as f:
            f.write("[pytest]\n")
        start = time.perf_counter()
        done = subprocess.run(
            child_args(state, item.name, reports, ini),
            cwd=str(config.invocation_params.dir),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        took = time.perf_counter() - start
        got = []
        if os.path.exists(reports):
            with open(reports) as f:
                for line in f:
                    data = json.loads(line)
                    got.append(
                        config.hook.pytest_report_from_serializable(config=config, data=data)
                    )
    if any(r.when == "teardown" for r in got):
        return got
    when = "teardown" if any(r.when == "call" for r in got) else "call"
    return [*got, _crashed(item, done, took, when)]


def _crashed(
    item: pytest.Item, done: subprocess.CompletedProcess, took: float, when: str
) -> pytest.TestReport:
    """The failed report of a check whose child died (``when``: in its call, or after it)."""
    rc = done.returncode
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name} (signal {-rc})"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exited with status {rc} before it reported"
    tail = _tail((done.stdout or "") + (done.stderr or ""))
    text = (
        f"{item.name}: this check crashed its process ({how}): the plugin's compiler or "
        f"code died while it ran (run alone: -k '{item.name}')"
        + (f"\nthe check's last output:\n{tail}" if tail else "")
    )
    outcome, extra = "failed", {}
    mark = item.get_closest_marker("xfail")
    if mark is not None:  # a declared known failure: the crash is the failure it expects
        outcome, extra = "skipped", {"wasxfail": mark.kwargs.get("reason", "")}
    if outcome == "skipped":
        longrepr: Any = (str(item.path), None, f"{extra['wasxfail']}: {how}")
    else:
        longrepr = text
    return pytest.TestReport(
        item.nodeid,
        item.location,
        {k: 1 for k in item.keywords},
        outcome,
        longrepr,
        when,
        duration=took,
        user_properties=[],
        **extra,
    )


def _tail(output: str) -> str:
    """The last lines of a crashed child's output, less the Python stacks its fault handler
    printed (the plugin's own last words come before them)."""
    before, fatal, after = output.partition("Fatal Python error:")
    lines = before.rstrip().splitlines()[-TAIL_LINES:]
    if fatal:  # its first line names the signal ("Fatal Python error: Aborted")
        lines.append(fatal + (after.splitlines() or [""])[0])
    return "\n".join(lines)
