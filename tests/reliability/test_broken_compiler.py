"""A broken C++ compiler (issue 47): one that fails every run, as where its assembler is
missing. The warning quotes the compiler's own first error line, and ``sdk.explain`` gives
the error once, not once per op it sent to ATen."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tests import fresh

BROKEN = """#!/bin/sh
echo "g++: fatal error: cannot execute 'as'" >&2
echo "compilation terminated." >&2
exit 1
"""

MLP = textwrap.dedent(
    """
    import warnings
    import torch, sdk
    warnings.simplefilter("always")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 8),
    )
    x = torch.randn(4, 16)
    with warnings.catch_warnings(record=True) as caught:
        report = sdk.explain(lambda x: model(x).sigmoid().sum(), x)
    for w in caught:
        print("WARNING", w.category.__name__, str(w.message).replace(chr(10), " | "))
    print(report, flush=True)
    # done: exit without the interpreter's last collections over all that torch made (about
    # 1 s of the process); exit handlers still run
    import gc
    gc.freeze()
    """
)


def test_a_broken_compiler_is_quoted_and_its_error_reported_once(tmp_path: Path) -> None:
    """A compiler that fails every run (as where its assembler is missing): the warning
    quotes its own first error line, and the report gives the error once for all the ops it
    sent to ATen, not once per op."""
    cxx = tmp_path / "g++"
    cxx.write_text(BROKEN)
    cxx.chmod(0o755)
    env = fresh.one_thread(
        SDK_CACHE_DIR=str(tmp_path / "sdk"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        CXX=str(cxx),
    )
    proc = fresh.run([sys.executable, "-c", MLP], env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    lines = proc.stdout.splitlines()
    warned = [ln for ln in lines if ln.startswith("WARNING PluginFallbackWarning")]
    assert len(warned) == 1, proc.stdout
    assert "g++: fatal error: cannot execute 'as'" in warned[0], warned[0]
    runner = [ln for ln in lines if ln.startswith("WARNING RuntimeWarning") and "runner" in ln]
    assert len(runner) <= 1 and all("cannot execute 'as'" in ln for ln in runner), runner
    report = [ln for ln in lines if not ln.startswith("WARNING")]
    text = "\n".join(report)
    assert "fallback" in text, text
    assert text.count("compilation terminated.") == 1, text
    assert text.count("command: ") == 1, text
    assert len(report) < 40, text
