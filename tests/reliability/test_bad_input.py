"""Bad options, modes and plugin names: one clear line each, as early as torch allows
(issue 24). ``sdk.backend(...)`` checks at once; ``torch.compile(backend="sdk:x", mode=...,
options=...)`` hands mode and options to the backend only at the first call, where the error
is raised as the SDK's own exception (not Dynamo's ``BackendCompilerFailed``) over a short
traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import sdk
from tests import fresh

BAD = {
    "bad-type": (
        {"options": {"fusion": "maybe"}},
        sdk.OptionError,
        "option 'fusion' for sdk:cpu_cpp must be bool, got str 'maybe'",
    ),
    "unknown-key": (
        {"options": {"fusoin": True}},
        sdk.OptionError,
        "unknown option 'fusoin' for sdk:cpu_cpp; known options:",
    ),
    "unknown-mode": (
        {"mode": "fastest"},
        sdk.OptionError,
        "unknown mode 'fastest' for sdk:cpu_cpp; known modes:",
    ),
    "unknown-chain": (
        {"options": {"chain": ["nope"]}},
        sdk.UnknownPluginError,
        "no SDK plugin named 'nope' is installed",
    ),
    "chain-of-a-wrapper": ({"options": {"chain": ["cudagraphs"]}}, sdk.SDKError, "cudagraphs"),
}


@pytest.mark.parametrize("case", BAD)
def test_torch_compile_raises_the_sdk_error_at_the_first_call(case):
    kw, error, words = BAD[case]
    f = torch.compile(lambda x: x * 2, backend="sdk:cpu_cpp", **kw)  # torch keeps them
    with pytest.raises(error) as info:
        f(torch.randn(4))
    assert words in str(info.value)
    assert "BackendCompilerFailed" not in type(info.value).__name__


@pytest.mark.parametrize("case", [c for c in BAD if "options" in BAD[c][0]])
def test_sdk_backend_raises_at_once(case):
    kw, error, words = BAD[case]
    with pytest.raises(error, match=words.split(";")[0].replace("(", r"\(")):
        sdk.backend("cpu_cpp", **kw["options"])


def test_the_user_sees_a_short_error():
    code = (
        "import torch\n"
        "f = torch.compile(lambda x: x * 2, backend='sdk:cpu_cpp', options={'fusion': 1})\n"
        "f(torch.randn(3))\n"
    )
    run = fresh.run([sys.executable, "-c", code], env=fresh.one_thread(), timeout=120)
    assert run.returncode == 1
    err = run.stderr.strip().splitlines()
    assert any(
        line.startswith("sdk.errors.OptionError: option 'fusion' for sdk:cpu_cpp must be bool")
        for line in err
    ), run.stderr
    assert "BackendCompilerFailed" not in run.stderr
    assert len(err) <= 15, run.stderr  # was 30 lines of Dynamo's frames and a wrapped error


@pytest.mark.parametrize(
    ("name", "near"), [("sdk:cpu_cp", "cpu_cpp"), ("sdk:cpu-cpp", "cpu_cpp"), ("sdk:nope", None)]
)
def test_an_unknown_backend_name_fails_at_torch_compile_naming_the_installed_plugins(name, near):
    """A typo, or a plugin not installed: no wheel declares the name, and Dynamo raised its
    own InvalidBackend, naming no plugin; Dynamo's lookup now loads the SDK's answer."""
    with pytest.raises(sdk.UnknownPluginError) as info:
        torch.compile(lambda x: x, backend=name)
    message = str(info.value)
    assert f"no SDK plugin named {name[4:]!r} is installed (discovered: " in message, message
    assert all(p["name"] in message for p in sdk.list_plugins()), message
    if near:
        assert f"did you mean {near!r} (backend='sdk:{near}')?" in message, message
    else:
        assert "did you mean" not in message, message


def test_a_mistyped_backend_name_in_a_new_process_gets_the_sdk_s_error():
    """``import sdk`` imports no Dynamo: its registry of names learns the SDK's when Dynamo
    is imported, later; a declared name still compiles."""
    code = (
        "import sys, torch, sdk\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "f = torch.compile(torch.sin, backend='sdk:cpu_cpp')\n"
        "x = torch.randn(3)\n"
        "torch.testing.assert_close(f(x), torch.sin(x))\n"
        "torch.compile(torch.sin, backend='sdk:cpu_cp')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("sdk.errors.UnknownPluginError: no SDK plugin named 'cpu_cp'"), last
    assert "did you mean 'cpu_cpp'" in last and "InvalidBackend" not in run.stderr, run.stderr


# -- tensors on a device the plugin does not declare -----------------------------------------

#: Run in a child process: a plugin handed meta "pointers" crashes the process (SIGSEGV).
#: Graphs whose inputs, or a value they make, are on meta: each compiled, explained, and
#: compiled with fallback=False; one JSON line each.
ON_META = """
import json
import torch
import sdk

cases = {
    "sum": (lambda a: (a * 2).sum(), torch.randn(4, device="meta")),
    "relu": (torch.relu, torch.randn(3, 5, device="meta")),
    "moved": (lambda a: (a * 2).to("meta") + 1, torch.randn(4)),
}
for name, (fn, x) in cases.items():
    out = torch.compile(fn, backend="sdk:cpu_cpp")(x)
    report = sdk.explain(fn, x)
    try:
        torch.compile(fn, backend=sdk.backend("cpu_cpp", fallback=False))(x)
        strict = None
    except Exception as exc:
        strict = str(exc)
    print(json.dumps({
        "case": name,
        "out": [out.device.type, list(out.shape)],
        "kernels": len(report.kernels),
        "reasons": sorted({f.reason for f in report.fallbacks}),
        "strict": strict,
    }), flush=True)
# done: exit without the interpreter's last collections over all that torch made (about 1 s
# of the process); exit handlers still run
import gc
gc.freeze()
"""


def test_graphs_on_an_undeclared_device_run_through_aten():
    """cpu_cpp declares cpu: a graph on meta falls back to ATen, which gives meta outputs as
    eager does (it crashed the process), and says why in explain; fallback=False raises
    naming the device and the plugin. A CPU graph that moves a value to meta runs that part
    through ATen."""
    run = fresh.run([sys.executable, "-c", ON_META], env=fresh.one_thread(), timeout=300)
    assert run.returncode == 0, f"exit status {run.returncode}\n{run.stderr[-3000:]}"
    rows = {r["case"]: r for r in map(json.loads, run.stdout.splitlines())}
    assert [rows[c]["out"] for c in ("sum", "relu", "moved")] == [
        ["meta", []],
        ["meta", [3, 5]],
        ["meta", [4]],
    ], run.stdout
    why = "sdk:cpu_cpp does not run on meta tensors (it declares cpu)"
    for row in (rows["sum"], rows["relu"]):
        assert row["kernels"] == 0 and row["reasons"] == [why], row
        assert "fallback'] is False: " + why in row["strict"], row
    # a graph on the CPU that moves a value to meta: its kernels are compiled, what runs on
    # meta goes through ATen (a CPU step count beside a CUDA model, a mask made on the
    # CPU: the whole graph ran in ATen for it)
    moved = rows["moved"]
    elsewhere = "computes on meta, where the graph's kernels run on cpu"
    assert moved["kernels"] == 1 and moved["reasons"] == [elsewhere], moved
    assert elsewhere in moved["strict"] and "options['fallback'] is False" in moved["strict"]
