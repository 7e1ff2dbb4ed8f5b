"""``import sdk`` from a source checkout where the project is not installed (sdk/_checkout.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_an_uninstalled_checkout_names_the_cause_and_the_fix(tmp_path):
    """Python run in a checkout's root (``python -m sdk ...``) finds ``./sdk``; without the
    install, ``sdk.core`` does not exist there, and ``import sdk`` failed with "No module
    named 'sdk.core'". It now raises an ImportError naming the checkout and the install.
    The interpreter runs without site-packages (``-S``: no installed sdk) but with
    pluggy's directory, in a copy of the checkout's ``sdk/`` beside a ``core/``."""
    import pluggy

    repo = ROOT
    shutil.copytree(repo / "sdk", tmp_path / "sdk", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("")
    site_dir = Path(pluggy.__file__).resolve().parents[1]
    code = f"import sys; sys.path.append({str(site_dir)!r}); import sdk"
    run = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: 'sdk' was imported from the source checkout"), last
    assert str(tmp_path) in last and "pip install -e ." in last, last
    from sdk import _checkout

    assert _checkout.problem(str(tmp_path / "elsewhere")) is None
