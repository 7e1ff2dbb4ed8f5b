"""The docs say what the code does.

* The README's set-up commands are the ones CI runs, and they work; the main job installs
  only the SDK and the model library it runs.
* The python blocks of the README, docs/user-guide.md and CONTRIBUTING.md run as written
  (a block fenced ``python no-run`` needs a GPU or several processes and is not run), and
  the README's example prints the report the README shows.
* The vendor guide's tables name exactly the hooks of sdk/hookspecs.py (with their
  arguments) and the options the core owns (core/options.py, with their defaults); its
  sample of the conformance summary has a row per check the suite runs, and is what the
  summary prints.
* The test files CONTRIBUTING.md names exist.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import sdk
import sdk.hookspecs
from sdk.core.options import CORE_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
#: the documents whose python blocks run (each block in a namespace of its own)
RUNNABLE_DOCS = ("README.md", "docs/user-guide.md", "CONTRIBUTING.md")
VENDOR_GUIDE = ROOT / "docs" / "vendor-guide.md"


def _bash_blocks(markdown: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", markdown, flags=re.DOTALL)]


def _python_blocks(markdown: str) -> list[tuple[str, str]]:
    """(info string, code) of each python block: info ``python`` or ``python no-run``."""
    return re.findall(r"```(python[^\n]*)\n(.*?)```", markdown, flags=re.DOTALL)


def _section(markdown: str, heading: str) -> str:
    return markdown.split(heading, 1)[1].split("\n## ", 1)[0]


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
    assert tests[1] == "pip install -e '.[test]'"
    assert tests[2] == "pip install ./examples/iree_vendor"


def test_the_main_job_installs_the_sdk_and_the_model_library_it_runs():
    """Not the test extras (triton, IREE, matplotlib, ruff: GBs a demo does not use): the
    SDK itself, and the library of the model ``python -m sdk run`` compiles by default."""
    main = _quick_start()[0]
    assert main[1] == "pip install -e . transformers"
    demo = (ROOT / "tools" / "demo.py").read_text()
    assert "from transformers import" in demo
    assert 'run.add_argument("--model", default="gpt2"' in (ROOT / "sdk" / "cli.py").read_text()


def test_a_checkout_installs_an_extra_from_its_directory():
    """``pip install 'torch-backend-sdk[plot]'`` asks an index for the SDK, not this checkout."""
    for doc in (*RUNNABLE_DOCS, "docs/vendor-guide.md", "BENCHMARKS.md", "TESTING.md"):
        text = (ROOT / doc).read_text()
        assert not re.search(r"pip install \S*torch-backend-sdk\[", text), doc


def test_contributing_has_the_readme_test_command():
    readme_tests = _quick_start()[1]
    text = (ROOT / "CONTRIBUTING.md").read_text()
    commands = [[c.strip() for c in b.split("&&")] for b in _bash_blocks(text)]
    assert readme_tests in commands


def test_the_version_sensitive_test_files_exist():
    """CONTRIBUTING.md's command for the version-sensitive files names files that exist
    (a renamed file would otherwise drop out of the runs on other torch releases)."""
    section = _section((ROOT / "CONTRIBUTING.md").read_text(), "## Tests")
    (command,) = [
        b for b in _bash_blocks(section) if b.startswith("python -m pytest") and "tests/" in b
    ]
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "pytest"]
    files = [w for w in words if w.startswith("tests/")]
    assert len(files) == 6, files
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"CONTRIBUTING.md names test files that do not exist: {missing}"


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
    # as a user runs it: no SDK_ variable but the one runner build of the test run
    # (conftest's SDK_RUNNER_DIR; without it, a cold home cache builds the runner again, 25 s
    # of CI's two cores)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDK_") or k == "SDK_RUNNER_DIR"}
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


# -- the python blocks -------------------------------------------------------------------

_BLOCKS = [
    pytest.param(doc, i, code, id=f"{doc}:{i}")
    for doc in RUNNABLE_DOCS
    for i, (info, code) in enumerate(_python_blocks((ROOT / doc).read_text()))
    if info.strip() == "python"
]


def test_every_python_block_runs_or_says_why_not():
    for doc in RUNNABLE_DOCS:
        for info, _code in _python_blocks((ROOT / doc).read_text()):
            assert info.strip() in ("python", "python no-run"), (doc, info)
    assert {p.values[0] for p in _BLOCKS} >= {"README.md", "docs/user-guide.md"}


def _run_block(code: str, name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, name, "exec"), {"__name__": "__docs__"})
    return out.getvalue()


@pytest.mark.parametrize(("doc", "index", "code"), _BLOCKS)
def test_python_block_runs(doc, index, code, tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    _run_block(code, f"{doc}:{index}")


def test_readme_example_prints_the_report_the_readme_shows(tmp_path):
    """The README's example explains what it compiled (what torch.compile returned, a
    forward under no_grad: one inference graph, no backward), and the lines the README shows
    are the report's (each up to its ``...``), as a run of its own prints them (graph names
    count up through a process: the README showed g1_inference where a run prints g0)."""
    text = (ROOT / "README.md").read_text()
    section = _section(text, "## In Python")
    (code,) = [c for info, c in _python_blocks(section) if info.strip() == "python"]
    assert "torch.compile(model, backend=backend)" in code
    assert "sdk.explain(compiled, x)" in code
    (tmp_path / "example.py").write_text(code)
    proc = subprocess.run(
        [sys.executable, "example.py"],
        env={**os.environ, "SDK_CACHE_DIR": str(tmp_path / "cache")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout.strip().splitlines()
    (shown,) = re.findall(r"```text\n(.*?)```", section, flags=re.DOTALL)
    shown = shown.strip().splitlines()
    assert len(printed) == len(shown), "\n".join(printed)
    for want, got in zip(shown, printed):
        head = want.split("...")[0]
        assert got.startswith(head), f"README shows {want!r}, the example printed {got!r}"


# -- the vendor guide's tables, against the code ----------------------------------------


def _table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("| `"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _contract() -> str:
    return _section(VENDOR_GUIDE.read_text(), "## The plugin contract")


def test_hook_table_lists_every_hook_with_its_arguments():
    specs = {
        name: list(inspect.signature(fn).parameters)
        for name, fn in vars(sdk.hookspecs).items()
        if name.startswith("sdk_") and callable(fn) and hasattr(fn, "sdk_spec")
    }
    assert len(specs) >= 19, sorted(specs)
    table = {}
    for row in _table_rows(_contract().split("**The hooks**", 1)[1].split("**Options.**")[0]):
        m = re.fullmatch(r"`(sdk_\w+)\(([^)]*)\)`", row[0])
        assert m, row[0]
        args = [a.strip() for a in m.group(2).split(",") if a.strip()]
        assert m.group(1) not in table, f"{m.group(1)} is listed twice"
        table[m.group(1)] = args
    assert sorted(table) == sorted(specs), (
        f"hooks in sdk/hookspecs.py missing from the vendor guide's table: "
        f"{sorted(set(specs) - set(table))}; listed but not hooks: {sorted(set(table) - set(specs))}"
    )
    wrong = {n: (table[n], specs[n]) for n in specs if table[n] != specs[n]}
    assert not wrong, f"arguments differ (table, spec): {wrong}"


def test_options_table_lists_every_core_option_with_its_default():
    rows = _table_rows(_contract().split("**Options.**", 1)[1])
    table = {}
    for row in rows:
        name, default = row[0].strip("`"), row[1].strip("`")
        assert name not in table, f"{name} is listed twice"
        table[name] = default
    assert sorted(table) == sorted(CORE_OPTIONS), (
        f"core options missing from the vendor guide's table: "
        f"{sorted(set(CORE_OPTIONS) - set(table))}; listed but not the core's: "
        f"{sorted(set(table) - set(CORE_OPTIONS))}"
    )
    wrong = {
        n: (table[n], repr(s.default))
        for n, s in CORE_OPTIONS.items()
        if table[n] != repr(s.default)
    }
    assert not wrong, f"defaults differ (table, core/options.py): {wrong}"
    # and every one of them is accepted by a backend (the table is what users may pass)
    sdk.backend("cpu_cpp", **{n: s.default for n, s in CORE_OPTIONS.items()})


def test_capability_and_preference_tables_list_every_member_and_field():
    """The guide's "Capabilities and preferences" lists each ``sdk.Capability`` member and
    each ``sdk.Preferences`` field (with its default), no more."""
    section = _section(VENDOR_GUIDE.read_text(), "## Capabilities and preferences")
    caps, prefs = section.split("sdk_preferences()", 1)
    listed = [row[0].strip("`") for row in _table_rows(caps)]
    assert listed == [c.name for c in sdk.Capability], (listed, list(sdk.Capability))
    listed = [row[0].strip("`") for row in _table_rows(prefs)]
    fields = dataclasses.fields(sdk.Preferences)
    assert listed == [f.name for f in fields], listed
    assert all(f.default is False for f in fields), "the table's header says: default False"


def _suite_counts() -> dict[str, int]:
    """The conformance suite's checks per row of its summary, for one plugin: each test of
    sdk/conformance/suite.py times its parameters, each OpInfo case of the default selection
    on the CPU (what ``python -m sdk conformance cpu_cpp`` runs)."""
    from sdk import conformance as C
    from sdk.conformance import pytest_plugin, suite

    counts: dict[str, int] = {}
    for name, fn in vars(suite).items():
        if not name.startswith("test_") or not callable(fn) or name == "test_opinfo":
            continue
        n = 1
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "parametrize":
                n *= len(mark.args[1])
        row = pytest_plugin.category(name)
        counts[row] = counts.get(row, 0) + n
    for case in C.opinfo_cases("default", "cpu"):
        row = pytest_plugin.category("test_opinfo", case)
        counts[row] = counts.get(row, 0) + 1
    return counts


def _cell(cell: str) -> dict[str, int]:
    """A summary cell (``3/3, 1 skipped``) as the suite's outcome counts."""
    m = re.fullmatch(r"(\d+)/(\d+)(?:, (\d+) skipped)?(?:, (\d+) xfail)?", cell)
    assert m, f"not a cell of the conformance summary: {cell!r}"
    passed, run, skipped, xfailed = (int(g or 0) for g in m.groups())
    return {"passed": passed, "failed": run - passed, "skipped": skipped, "xfailed": xfailed}


def test_the_guides_conformance_listing_is_what_the_suite_prints(monkeypatch):
    """The vendor guide's sample of ``python -m sdk conformance cpu_cpp --compare none``:
    one row per check the suite runs (a new check gets its row), each row's count that
    check's tests (the OpInfo rows: the default selection's cases), its total the sum, and
    the listing exactly the lines the summary prints for those counts."""
    from sdk.conformance import pytest_plugin

    text = VENDOR_GUIDE.read_text()
    listing = re.search(
        r"It ends with a summary: a table you can paste.*?```\n(.*?)```", text, re.DOTALL
    )
    assert listing, "the guide's sample of the conformance summary is gone"
    lines = listing.group(1).rstrip("\n").split("\n")
    rows = {}
    for line in lines[lines.index("| check | sdk:cpu_cpp |") + 2 :]:
        if not line.startswith("| "):
            break
        name, cell = line[2:-2].split(" | ")
        rows[name] = cell
    counts = _suite_counts()
    listed = {r: _cell(c) for r, c in rows.items() if r in counts}
    assert sorted(listed) == sorted(counts), (
        f"checks the suite runs without a row in the guide's listing: "
        f"{sorted(set(counts) - set(listed))}; rows that are no check: "
        f"{sorted(set(rows) - set(counts) - {'**total**', 'opinfo passes in generated kernels'})}"
    )
    wrong = {r: (rows[r], counts[r]) for r, c in listed.items() if sum(c.values()) != counts[r]}
    assert not wrong, f"rows whose counts are not the suite's number of tests: {wrong}"
    results = {(r, "cpu_cpp"): c for r, c in listed.items()}
    made = _cell(rows["opinfo passes in generated kernels"])
    monkeypatch.setattr(
        pytest_plugin,
        "_STATE",
        {
            "plugins": ["cpu_cpp"],
            "results": results,
            "kernels": {"cpu_cpp": {"passed": made["passed"], "skipped": made["failed"]}},
            "failures": [],
        },
    )
    printed = pytest_plugin.summary_lines()
    assert re.fullmatch(
        r"sdk conformance: torch \S+, torch-backend-sdk \S+, \w+ \w+, python \S+", lines[0]
    ), lines[0]
    assert lines[1:] == printed[1:], (
        "the guide's listing is not what the summary prints for its counts:\n"
        + "\n".join(printed[1:])
    )
