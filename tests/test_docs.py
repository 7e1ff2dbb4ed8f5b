"""The README's set-up commands are the ones CI runs, and they work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks(markdown: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", markdown, flags=re.DOTALL)]


def _quick_start() -> list[list[str]]:
    """The Quick start's copy-paste blocks, each split into its commands."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in block.split("&&")] for block in _bash_blocks(section)]


def test_quick_start_has_two_set_up_commands():
    blocks = _quick_start()
    assert len(blocks) == 2
    main, tests = blocks
    assert main[-1] == "python -m sdk run"
    assert tests[-1] == "python -m pytest -q -n auto"
    for block in blocks:
        assert block[0].startswith("pip install torch==2.13.0")
        assert block[1] == "pip install -e '.[test]'"
    assert tests[2] == "pip install ./examples/iree_vendor"


def test_ci_runs_the_readme_test_command():
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK), ".ci/run must be executable (chmod +x)"
    lines = [ln.strip() for ln in script.read_text().splitlines()]
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    commands = [ln.split(" || ")[0] for ln in lines if ln.startswith(("pip ", "python "))]
    assert commands == _quick_start()[1]


def test_ci_installs_into_a_fresh_virtual_environment():
    """A package already installed (pytest 9.2 rather than 9.0, say) must not hide what a
    fresh machine fails on: .ci/run makes a new venv, without the system's site-packages,
    and activates it before its first install."""
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    first_pip = next(i for i, ln in enumerate(lines) if ln.startswith("pip "))
    before = lines[:first_pip]
    venv = [ln for ln in before if re.search(r"python3?\S*\s+-m venv ", ln)]
    assert venv, "no `python -m venv` before the first pip install"
    assert "--system-site-packages" not in venv[0]
    assert any(re.fullmatch(r"(\.|source) \S*/bin/activate\"?", ln) for ln in before)
    # a new directory each run (mktemp -d), or the old one removed first
    assert any("mktemp -d" in ln or ln.startswith("rm -rf") for ln in before)


@pytest.mark.slow
def test_sdk_run_mlp(tmp_path):
    """``python -m sdk run`` (the README's main job), on the small model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDK_")}
    proc = subprocess.run(
        [sys.executable, "-m", "sdk", "run", "--model", "mlp", "--steps", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
