"""``pytest --sdk-plugin=NAME``: the conformance suite as a pytest plugin.

Loaded through this distribution's ``pytest11`` entry point, so it is there in every pytest
run of an environment with the SDK installed, and does nothing unless ``--sdk-plugin`` is
given. Then pytest collects :mod:`sdk.conformance.suite` (instead of the directory's own
tests), runs every check for each plugin named and for the built-in plugins of the same
device (``--sdk-compare``), and ends with a summary table a vendor can paste.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections import defaultdict
from typing import Any

import pytest

_STATE: dict[str, Any] = {}
OUTCOMES = ("passed", "failed", "skipped", "xfailed")


def pytest_addoption(parser: pytest.Parser) -> None:
    from sdk import conformance as C  # (sdk is imported already: this module is in it)

    group = parser.getgroup("sdk", "torch-backend-sdk conformance suite")
    group.addoption(
        "--sdk-plugin",
        action="append",
        default=[],
        metavar="NAME",
        help="run the conformance suite on sdk:NAME (repeat for several)",
    )
    group.addoption(
        "--sdk-compare",
        default="builtin",
        metavar="NAMES",
        help="also run these plugins, for comparison: 'builtin' (default: the "
        "built-in codegen plugins of the same device), 'none', or names",
    )
    group.addoption(
        "--sdk-opinfo",
        default="default",
        metavar="SET",
        help=f"OpInfo ops: 'quick' ({len(C.QUICK_OPS)} OpInfos), 'default' "
        f"({len(C.DEFAULT_OPS)}), 'all' (every OpInfo of torch's op_db, long) or "
        "comma-separated op names (a name without its variant names every variant)",
    )
    group.addoption(
        "--sdk-samples",
        default=C.DEFAULT_SAMPLES,
        type=int,
        metavar="N",
        help=f"sample inputs compared per OpInfo case, the first N (default "
        f"{C.DEFAULT_SAMPLES}); each compiles afresh",
    )
    group.addoption(
        "--sdk-isolate",
        action="store_true",
        help="run each check in a pytest process of its own: a plugin that crashes the "
        "process (a segfault, an abort) fails that check, named, and the run goes on",
    )
    # (the child process of an isolated check: which one, and where its reports go)
    group.addoption("--sdk-case", default=None, help=argparse.SUPPRESS)
    group.addoption("--sdk-case-reports", default=None, help=argparse.SUPPRESS)
    group.addoption(
        "--sdk-device",
        default=None,
        metavar="TYPE",
        help="device type of the test tensors (default: the first of the "
        "plugin's device_types that torch has here)",
    )


def pytest_configure(config: pytest.Config) -> None:
    names = config.getoption("sdk_plugin", default=[])
    if not names:
        return
    import sdk
    from sdk import conformance as C

    try:
        _configure(config, names, C)
    except sdk.SDKError as exc:  # unknown or unavailable: cause and fix, not a traceback
        raise pytest.UsageError(f"--sdk-plugin: {exc}") from None


def _configure(config: pytest.Config, names: list[str], C: Any) -> None:
    device = config.getoption("sdk_device")
    plugins = list(dict.fromkeys(names))
    compare = config.getoption("sdk_compare")
    if compare == "builtin":
        extra = C.builtin_peers(plugins[0], C.device_for(plugins[0], device))
    elif compare == "none":
        extra = []
    else:
        extra = [n.strip() for n in compare.split(",") if n.strip()]
    plugins += [n for n in extra if n not in plugins]
    for n in plugins:
        C.require(n)  # unknown or unavailable: an error naming cause and fix, before collecting
    _STATE.update(
        plugins=plugins,
        device=device,
        opinfo=config.getoption("sdk_opinfo"),
        samples=config.getoption("sdk_samples"),
        rootdir=str(config.rootpath),
        case=config.getoption("sdk_case"),
        case_reports=config.getoption("sdk_case_reports"),
        isolate=config.getoption("sdk_isolate") and not config.getoption("sdk_case"),
        config=config,
        results=defaultdict(lambda: defaultdict(int)),
        kernels=defaultdict(lambda: defaultdict(int)),
        failures=[],
    )
    # programs compiled by earlier runs must not answer: the suite checks this plugin's
    # kernels as they are now (the cache checks turn the cache on in a private directory)
    from sdk import _config as env

    _STATE["saved_env"] = env.set_variables(SDK_GRAPH_CACHE="0")
    suite = os.path.join(os.path.dirname(__file__), "suite.py")
    config.args[:] = [suite]
    config.addinivalue_line("markers", "sdk_conformance: a check of the SDK conformance suite")


@pytest.fixture
def sdk_samples(request: pytest.FixtureRequest) -> int:
    """How many sample inputs each OpInfo case compares (``--sdk-samples``)."""
    return max(int(request.config.getoption("sdk_samples")), 1)


def pytest_unconfigure(config: pytest.Config) -> None:
    if "plugins" in _STATE:
        from sdk import _config as env

        env.set_variables(**_STATE["saved_env"])
        _STATE.clear()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "plugins" not in _STATE or "sdk_plugin" not in metafunc.fixturenames:
        return
    from sdk import conformance as C

    plugins = _STATE["plugins"]
    devices = {p: C.device_for(p, _STATE["device"]) for p in plugins}
    if "opinfo_case" in metafunc.fixturenames:
        selection = metafunc.config.getoption("sdk_opinfo")
        by_device = {d: C.opinfo_cases(selection, d) for d in set(devices.values())}
        known = {p: C.known_failures(p) for p in plugins}
        params = [
            _opinfo_param(p, devices[p], c, known[p])
            for p in plugins
            for c in by_device[devices[p]]
        ]
        metafunc.parametrize(("sdk_plugin", "sdk_device", "opinfo_case"), params)
    elif "sdk_device" in metafunc.fixturenames:
        metafunc.parametrize(
            ("sdk_plugin", "sdk_device"), [(p, devices[p]) for p in plugins], ids=plugins
        )
    else:
        metafunc.parametrize("sdk_plugin", plugins, ids=plugins)


def _opinfo_param(plugin: str, device: str, case: tuple[str, str, str], known: dict) -> Any:
    """One OpInfo case of ``plugin``; a strict xfail where the plugin declares it a known
    failure (:func:`sdk.conformance.known_failures`), so that one that passes is reported."""
    case_id = "-".join(case)
    marks = []
    if case_id in known:
        marks.append(pytest.mark.xfail(strict=True, reason=f"sdk:{plugin}: {known[case_id]}"))
    return pytest.param(plugin, device, case, id=f"{plugin}-{case_id}", marks=marks)


def case_id(item: pytest.Item) -> str | None:
    """The id a plugin's ``KNOWN_FAILURES`` names a check other than an OpInfo case by: the
    test's name without ``test_``, with its parameters other than the plugin and device in
    brackets (``fault_falls_back_and_strict_raises[build]``,
    ``option_fallback_off_raises_on_a_refused_op``); None for an OpInfo case (its id is
    ``op-dtype-mode``, see :func:`_opinfo_param`)."""
    name = getattr(item, "originalname", item.name)
    if name == "test_opinfo" or not name.startswith("test_"):
        return None
    params = getattr(item, "callspec", None)
    rest = [
        str(v)
        for k, v in (params.params.items() if params is not None else ())
        if k not in ("sdk_plugin", "sdk_device")
    ]
    return name[len("test_") :] + (f"[{'-'.join(rest)}]" if rest else "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The checks other than OpInfo cases that a plugin declares it fails: strict xfails,
    as its declared OpInfo cases are."""
    if "plugins" not in _STATE:
        return
    from sdk import conformance as C

    known = {p: C.known_failures(p) for p in _STATE["plugins"]}
    for item in items:
        plugin = getattr(item, "callspec", None) and item.callspec.params.get("sdk_plugin")
        cid = case_id(item)
        if plugin in known and cid is not None and cid in known[plugin]:
            reason = f"sdk:{plugin}: {known[plugin][cid]}"
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
    if _STATE["case"] is not None:  # the child of an isolated check: that check only
        keep = [item for item in items if item.name == _STATE["case"]]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """``--sdk-isolate``: the check run in a child pytest, its reports replayed here."""
    if not _STATE.get("isolate"):
        return None
    from sdk.conformance import isolated

    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in isolated.run(item, _STATE):
        item.ihook.pytest_runtest_logreport(report=report)
        _count(item, report, [tuple(p) for p in report.user_properties])
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """The child of an isolated check: each report sent to the parent, as pytest
    serializes reports (pytest-xdist's way)."""
    path = _STATE.get("case_reports")
    if path is None:
        return
    config = _STATE["config"]
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open(path, "a") as f:
        f.write(json.dumps(data) + "\n")


def _category(item: pytest.Item) -> str:
    name = getattr(item, "originalname", item.name)
    case = item.callspec.params["opinfo_case"] if name == "test_opinfo" else None
    return category(name, case)


def category(name: str, opinfo_case: tuple[str, str, str] | None = None) -> str:
    """The summary's row of the suite's test ``name`` (``test_fault_chain_takes_over``:
    ``faults``); of ``test_opinfo``, per its case's dtype and mode (``opinfo fw+bw
    float32``)."""
    if name == "test_opinfo" and opinfo_case is not None:
        _, dt, mode = opinfo_case
        return f"opinfo {'fw+bw' if mode == 'fwbw' else 'fw'} {dt}"
    part = name.split("_")[1] if name.count("_") >= 1 else name
    return {"fault": "faults", "option": "options"}.get(part, part)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    if "plugins" not in _STATE or not hasattr(item, "callspec"):
        return
    _count(item, outcome.get_result(), item.user_properties)


def _count(item: pytest.Item, report: pytest.TestReport, properties: list) -> None:
    """``report`` of ``item`` in the summary's cells (``properties``: the item's user
    properties, which say whether an OpInfo case ran in generated kernels)."""
    plugin = item.callspec.params.get("sdk_plugin") if hasattr(item, "callspec") else None
    if plugin is None:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        kind = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        if hasattr(report, "wasxfail") and report.passed:
            kind = "failed"  # strict xfail that passed
        _STATE["results"][(_category(item), plugin)][kind] += 1
        if kind == "passed" and getattr(item, "originalname", "") == "test_opinfo":
            made = ("sdk_kernels", True) in properties
            _STATE["kernels"][plugin]["passed" if made else "skipped"] += 1
        if kind == "failed":
            _STATE["failures"].append((plugin, item.name))


def summary_lines() -> list[str]:
    """The summary table: for each category and plugin, passed/run and skips."""
    import torch

    import sdk

    plugins, results = _STATE["plugins"], _STATE["results"]
    cats = sorted({c for c, _ in results}, key=lambda c: (not c.startswith("opinfo"), c))
    lines = [
        (
            f"sdk conformance: torch {torch.__version__}, torch-backend-sdk {sdk.__version__}, "
            f"{platform.system()} {platform.machine()}, python {platform.python_version()}"
        ),
        "",
        "| check | " + " | ".join(f"sdk:{p}" for p in plugins) + " |",
        "|---" * (len(plugins) + 1) + "|",
    ]
    totals = {p: defaultdict(int) for p in plugins}
    for c in cats:
        cells = []
        for p in plugins:
            r = results[(c, p)]
            for k in OUTCOMES:
                totals[p][k] += r[k]
            cells.append(_cell(r))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(_cell(totals[p]) for p in plugins) + " |")
    if _STATE["kernels"]:
        made = [_STATE["kernels"][p] for p in plugins]
        lines.append(
            "| opinfo passes in generated kernels | "
            + " | ".join(f"{m['passed']}/{m['passed'] + m['skipped']}" for m in made)
            + " |"
        )
    lines.append("")
    lines.append(
        "cells: passed/run (run = passed + failed), then skipped and expected "
        "failures (xfail: a known failure the plugin declares with its reason, or a known "
        "gap of the SDK; one that passes counts as failed); last row: the OpInfo passes "
        "where the plugin generated at least one kernel (a graph-level plugin: compiled "
        "every op; the rest ran through ATen)"
    )
    for plugin, name in _STATE["failures"]:
        lines.append(f"FAILED {plugin}: {name}")
    return lines


def _cell(r: dict[str, int]) -> str:
    run = r["passed"] + r["failed"]
    cell = f"{r['passed']}/{run}"
    if r["skipped"]:
        cell += f", {r['skipped']} skipped"
    if r["xfailed"]:
        cell += f", {r['xfailed']} xfail"
    return cell


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "plugins" not in _STATE:
        return
    terminalreporter.section("sdk conformance summary")
    for line in summary_lines():
        terminalreporter.write_line(line)
