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
