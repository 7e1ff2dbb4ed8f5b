"""Commands that compile nothing start without Dynamo: ``import sdk``, ``python -m sdk list``,
``cache info``, ``new-plugin`` (importing ``torch._dynamo`` costs seconds of CPU before the
first line prints); ``python -m sdk --help`` and ``--version`` without torch at all. The
backends still load by their entry point without ``import sdk``. Each case runs in a fresh
process: this one has Dynamo loaded."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import sdk

#: modules a command that compiles nothing must not import
HEAVY = ("torch._dynamo", "torch._inductor", "torch._functorch.aot_autograd")

STARTUP = textwrap.dedent(
    """
    import json, runpy, sys

    HEAVY = {heavy!r}
    seen = {{}}

    def loaded():
        return [m for m in HEAVY if m in sys.modules]

    import sdk
    seen["import sdk"] = loaded()
    for argv in (["list"], ["cache", "info"], ["new-plugin", "acme_q", "--dest", {dest!r}]):
        sys.argv = ["sdk", *argv]
        try:  # what `python -m sdk ...` runs
            runpy.run_module("sdk", run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            assert exc.code == 0, (argv, exc.code)
        seen[" ".join(argv[:2])] = loaded()
    print(json.dumps(seen))
    """
)

#: torch.compile(backend="sdk:cpu_cpp") with sdk not imported: Dynamo finds the
#: torch_dynamo_backends entry point, which imports it (after ``import sdk`` it is what
#: every in-process compile test does)
COMPILE = textwrap.dedent(
    """
    import sys
    import torch

    def f(x):
        return (x * 2 + 1).relu().sum(0)

    x = torch.randn(8, 4)
    torch.testing.assert_close(torch.compile(f, backend="sdk:cpu_cpp")(x), f(x))
    print("sdk" in sys.modules, flush=True)
    # done: exit without the interpreter's last collections over all that torch made (about
    # 1 s of the process); exit handlers still run
    import gc
    gc.freeze()
    """
)


def run(code: str, tmp_path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_commands_that_compile_nothing_do_not_import_dynamo(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    code = STARTUP.format(heavy=HEAVY, dest=str(tmp_path / "new"))
    seen = json.loads(run(code, tmp_path))
    assert set(seen) == {"import sdk", "list", "cache info", "new-plugin acme_q"}, seen
    assert not any(seen.values()), f"loaded after each step (in turn, one process): {seen}"
    assert (tmp_path / "new" / "acme-q-sdk-plugin").is_dir()


def test_the_backend_loads_by_its_entry_point_without_import_sdk(tmp_path):
    assert run(COMPILE, tmp_path) == "True"


def test_help_and_version_import_no_torch(tmp_path):
    """``python -m sdk --help`` took 1.6 s, 1.1 s of it ``import torch`` (``import sdk``
    imported it): ``-X importtime`` lists every module the command imported."""
    for flag, printed in (
        ("--help", "usage: python -m sdk [-h] [--version]"),
        ("--version", f"torch-backend-sdk {sdk.__version__}"),
    ):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "sdk", flag],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.startswith(printed), proc.stdout
        imported = [
            ln.rsplit("|", 1)[-1].strip()
            for ln in proc.stderr.splitlines()
            if ln.startswith("import time:") and "|" in ln
        ]
        assert "sdk.cli" in imported, proc.stderr[-3000:]  # (the list is what it seems)
        torch = [m for m in imported if m == "torch" or m.startswith("torch.")]
        assert not torch, f"{flag} imported {torch[:5]}"
