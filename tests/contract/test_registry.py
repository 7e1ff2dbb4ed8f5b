"""Discovery: broken plugins are isolated, named, and explained; lists apply before import."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest
import torch

import sdk
from sdk.core.registry import ENTRY_POINT_GROUP

#: One broken plugin per way a plugin can be broken, by entry-point name: its module source
#: (after conftest.PLUGIN_HEAD, unless "head" is False; "api" and "info_name" fill the head
#: in), and the words its reason must contain.
BROKEN = {
    "import_error": {
        "source": "import acme_driver_that_is_not_installed\n",
        "reason": [
            "import failed",
            "ModuleNotFoundError",
            "acme_driver_that_is_not_installed",
            "reinstall",
        ],
    },
    "invalid_hookimpl": {
        "source": """
            @sdk.hookimpl
            def sdk_op_support(ctx, op, node, cost_model):
                return None
        """,
        "reason": ["invalid hookimpl", "sdk_op_support", "cost_model"],
    },
    "unknown_hook": {
        "source": """
            @sdk.hookimpl
            def sdk_lower_kernel(ctx, kernel):
                return None
        """,
        "reason": ["unknown hook", "sdk_lower_kernel", "hookspecs"],
    },
    "unmarked": {
        "source": """
            def sdk_plugin_status():
                return None
        """,
        "reason": ["sdk_plugin_status", "not decorated", "@sdk.hookimpl"],
    },
    "old_api": {
        "source": "",
        "api": sdk.HOOK_API_VERSION + 1,
        "reason": [f"hook API {sdk.HOOK_API_VERSION + 1}", "upgrade torch-backend-sdk"],
    },
    "misnamed": {
        "source": "",
        "info_name": "acme_misnamed",
        "reason": ["'acme_misnamed'", "'misnamed'", "make the two agree"],
    },
    "info_raises": {
        "head": False,
        "source": """
            import sdk

            @sdk.hookimpl
            def sdk_plugin_info():
                raise RuntimeError("driver handshake failed")
        """,
        "reason": ["sdk_plugin_info raised", "driver handshake failed"],
    },
}

GOOD_SOURCE = """
    SEEN = []

    @sdk.hookimpl
    def sdk_plugin_status():
        return None

    @sdk.hookimpl
    def sdk_op_support(ctx, op, node):  # renders no kernels: every op runs through ATen
        return sdk.Support.no("this test plugin renders no kernels")

    @sdk.hookimpl
    def sdk_on_graph_compiled(ctx, report):
        SEEN.append((ctx.plugin, report.kind))
"""


@pytest.fixture
def broken_world(make_plugin, fake_dist, use_registry):
    """A registry with cpu_cpp, one good plugin, and every kind of broken one."""
    plugins = {"good": make_plugin(GOOD_SOURCE, name="good")}
    for ep_name, case in BROKEN.items():
        plugins[ep_name] = make_plugin(
            case["source"],
            head=case.get("head", True),
            name=case.get("info_name", ep_name),
            api=case.get("api", "sdk.HOOK_API_VERSION"),
        )
    eps = fake_dist("acme-broken", plugins, version="2.0")
    return use_registry(eps)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_plugin_is_listed_unavailable_with_distribution_and_reason(broken_world, name):
    rows = {r["name"]: r for r in sdk.list_plugins()}
    row = rows[name]
    assert row["distribution"] == "acme-broken 2.0"
    assert row["status"].startswith("unavailable: ")
    for word in BROKEN[name]["reason"]:
        assert word in row["status"], (word, row["status"])


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_asking_for_a_broken_plugin_names_plugin_distribution_cause_and_fix(broken_world, name):
    with pytest.raises(sdk.PluginUnavailableError) as info:
        sdk.backend(name)
    message = str(info.value)
    assert repr(name) in message
    assert "acme-broken 2.0" in message
    for word in BROKEN[name]["reason"]:
        assert word in message
    # the fix: every reason tells the user what to do after a semicolon
    assert ";" in message.split("is unavailable:", 1)[1], message


def test_broken_plugins_leave_the_good_ones_usable(broken_world, seeded):
    rows = {r["name"]: r for r in sdk.list_plugins()}
    assert rows["good"]["status"] == "ok"
    assert rows["cpu_cpp"]["status"] == "ok"
    assert rows["good"]["distribution"] == "acme-broken 2.0"

    def fn(x):
        return torch.relu(x) * 3 - 1

    for backend in (sdk.backend("good"), "sdk:cpu_cpp"):
        x = torch.randn(5, 7)
        torch.testing.assert_close(torch.compile(fn, backend=backend)(x), fn(x))
    good = sys.modules[broken_world.record("good").value]
    assert ("good", "inference") in good.SEEN


def test_half_registered_plugin_does_not_observe_compiles(make_plugin, fake_dist, use_registry):
    """A plugin that failed validation must not keep half of its hooks registered.

    pluggy's ``register`` adds hookimpls one by one and raises at the first
    invalid one, leaving the earlier ones (here ``sdk_on_graph_compiled``, which
    sorts before ``sdk_plugin_status``) in the manager.
    """
    module = make_plugin(
        """
        SEEN = []

        @sdk.hookimpl
        def sdk_on_graph_compiled(ctx, report):
            SEEN.append(report.name)

        @sdk.hookimpl
        def sdk_plugin_status(ctx):  # sdk_plugin_status takes no arguments
            return None
    """,
        name="half",
    )
    reg = use_registry(fake_dist("acme-half", {"half": module}))
    assert "invalid hookimpl" in reg.status("half")
    x = torch.randn(3)
    torch.compile(torch.sin, backend="sdk:cpu_cpp")(x)
    assert sys.modules[module].SEEN == [], "a plugin listed unavailable still receives hooks"


def test_entry_point_without_distribution(make_plugin, use_registry):
    module = make_plugin("import nowhere_to_be_found\n", head=False)
    reg = use_registry(EntryPoint("orphan", module, ENTRY_POINT_GROUP), builtins=False)
    row = sdk.list_plugins()[0]
    assert row["name"] == "orphan"
    assert row["distribution"].startswith("<unknown distribution>")
    assert "nowhere_to_be_found" in reg.status("orphan")


def test_duplicate_name_keeps_the_first_and_lists_the_second(make_plugin, fake_dist, use_registry):
    first = make_plugin(GOOD_SOURCE, name="twin")
    second = make_plugin(GOOD_SOURCE, name="twin")
    use_registry(fake_dist("acme-one", {"twin": first}), fake_dist("acme-two", {"twin": second}))
    rows = [r for r in sdk.list_plugins() if r["name"] == "twin"]
    assert [r["distribution"] for r in rows] == ["acme-one 0.0.1", "acme-two 0.0.1"]
    assert rows[0]["status"] == "ok"
    assert rows[1]["status"].startswith("unavailable: ")
    assert "acme-one" in rows[1]["status"] and "uninstall one" in rows[1]["status"]
    # the first one still works; the second was never imported
    x = torch.randn(4)
    torch.testing.assert_close(
        torch.compile(torch.cos, backend=sdk.backend("twin"))(x), torch.cos(x)
    )
    assert second not in sys.modules


def test_unknown_plugin_lists_known_ones(use_registry):
    use_registry()
    with pytest.raises(sdk.UnknownPluginError) as info:
        sdk.backend("acme_does_not_exist")
    message = str(info.value)
    assert "'acme_does_not_exist'" in message
    for known in ("cpu_cpp", "cuda_triton", "cudagraphs"):
        assert known in message
    assert "sdk.plugins" in message
    with pytest.raises(sdk.UnknownPluginError):
        sdk.backend("sdk:acme_does_not_exist")


def test_wrapper_plugin_is_not_a_backend(use_registry, make_plugin, fake_dist):
    module = make_plugin(name="wrap_only", kind="WRAPPER")
    use_registry(fake_dist("acme-wrap", {"wrap_only": module}))
    with pytest.raises(
        sdk.PluginUnavailableError, match="wrapper plugin, not a codegen or graph plugin"
    ):
        sdk.backend("wrap_only")


#: Importing this module leaves a trace, then fails loudly.
TRIPWIRE = """
import builtins
builtins.SDK_TEST_TRIPWIRE = getattr(builtins, "SDK_TEST_TRIPWIRE", 0) + 1
raise RuntimeError("this plugin must not be imported")
"""


@pytest.fixture
def tripwire(make_plugin, fake_dist):
    import builtins

    module = make_plugin(TRIPWIRE, head=False, name="tripwire")
    good = make_plugin(GOOD_SOURCE, name="good")
    eps = fake_dist("acme-lists", {"tripwire": module, "good": good})
    yield module, eps
    if hasattr(builtins, "SDK_TEST_TRIPWIRE"):
        del builtins.SDK_TEST_TRIPWIRE


@pytest.mark.parametrize(
    "variable, value",
    [
        ("SDK_PLUGINS_DENY", "tripwire"),
        ("SDK_PLUGINS_DENY", " cudagraphs , tripwire "),
        ("SDK_PLUGINS_ALLOW", "good,cpu_cpp"),
    ],
)
def test_allow_and_deny_lists_apply_before_import(
    tripwire, use_registry, monkeypatch, variable, value
):
    import builtins

    module, eps = tripwire
    monkeypatch.setenv(variable, value)
    reg = use_registry(eps)
    assert module not in sys.modules
    assert not hasattr(builtins, "SDK_TEST_TRIPWIRE")
    assert variable in reg.status("tripwire")
    assert reg.status("good") is None
    assert reg.status("cpu_cpp") is None
    with pytest.raises(sdk.PluginUnavailableError, match=variable):
        sdk.backend("tripwire")


def test_allow_list_leaves_others_unimported(tripwire, use_registry, monkeypatch):
    monkeypatch.setenv("SDK_PLUGINS_ALLOW", "cpu_cpp")
    reg = use_registry(tripwire[1])
    assert "not in SDK_PLUGINS_ALLOW" in reg.status("good")
    assert reg.record("good").plugin is None
    assert "SDK_PLUGINS_ALLOW" in reg.status("cuda_triton")


def test_without_lists_the_tripwire_is_imported_and_isolated(tripwire, use_registry):
    """The control for the tests above: the tripwire does go off when not denied."""
    import builtins

    _, eps = tripwire
    reg = use_registry(eps)
    assert builtins.SDK_TEST_TRIPWIRE == 1
    assert "this plugin must not be imported" in reg.status("tripwire")
    assert reg.status("good") is None


def _clean_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SDK_") and k not in ("TRITON_INTERPRET", "PYTHONPATH")
    }
    return env


def test_cli_list_shows_builtin_plugins(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sdk", "list"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:] if line.strip()}
    assert set(lines) >= {"cpu_cpp", "cuda_triton", "cudagraphs"}
    assert "torch-backend-sdk" in lines["cpu_cpp"]
    assert lines["cpu_cpp"].rstrip().endswith("ok")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the CUDA plugins are available here")
    for name in ("cuda_triton", "cudagraphs"):
        assert "unavailable: " in lines[name]
        assert "CUDA" in lines[name] and "torch.cuda.is_available()" in lines[name]


def test_cli_list_with_deny(tmp_path):
    env = {**_clean_env(), "SDK_PLUGINS_DENY": "cuda_triton"}
    proc = subprocess.run(
        [sys.executable, "-m", "sdk", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("cuda_triton"))
    assert "denied by SDK_PLUGINS_DENY" in line


GRAPH_LEVEL_SOURCE = """
    @sdk.hookimpl
    def sdk_claim_nodes(ctx, gm):
        return {}

    @sdk.hookimpl
    def sdk_compile_subgraph(ctx, gm, example_inputs):
        return sdk.CompiledSubgraph(fn=gm)

    @sdk.hookimpl
    def sdk_load_subgraph(ctx, artifact):
        return None
"""


@pytest.mark.parametrize("api", [1, 2, 3, 4, 5])
def test_plugins_of_every_supported_hook_api_load(make_plugin, fake_dist, use_registry, api):
    """Hook API 3 adds graph-level plugins; plugins written for the APIs before the newest
    (5: graph passes) load unchanged."""
    source, kind = (GRAPH_LEVEL_SOURCE, "GRAPH") if api == 3 else ("", "CODEGEN")
    module = make_plugin(source, name=f"api{api}", kind=kind, api=api)
    use_registry(fake_dist(f"acme-api{api}", {f"api{api}": module}))
    row = {r["name"]: r for r in sdk.list_plugins()}[f"api{api}"]
    assert row["status"] == "ok", row
    assert row["kind"] == kind.lower()
