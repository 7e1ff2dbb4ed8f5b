"""The contract's modules after issue 48 split ``sdk/plugin.py`` and ``sdk/hookspecs.py``: every
hook a group module defines reaches pluggy through ``sdk.hookspecs``, and every name a plugin
imported from ``sdk.plugin`` before the split still imports from there, as the same object."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pluggy

import sdk
import sdk.hookspecs
import sdk.plugin

#: the modules that define hooks (sdk/hookspecs.py and its group modules, sdk/hookspecs_*.py)
HOOK_MODULES = sorted(f"sdk.{p.stem}" for p in Path(sdk.__file__).parent.glob("hookspecs*.py"))

#: the public names of sdk.plugin before the split (hook API 7)
PLUGIN_NAMES = [
    "HOOK_API_VERSION",
    "SUPPORTED_HOOK_APIS",
    "PluginKind",
    "Capability",
    "RetiredCapability",
    "retired_fix",
    "Preferences",
    "OptionSpec",
    "CoreOptions",
    "PluginOptions",
    "RESERVED_OPTION_NAMES",
    "PluginInfo",
    "CompileUnavailable",
    "environment_variable",
    "KernelLimits",
    "CompileContext",
    "GraphPass",
    "KernelSource",
    "KernelVariant",
    "KernelChoices",
    "KernelFn",
    "NativeEntry",
    "Support",
    "ClaimGroups",
    "CompiledSubgraph",
]


def _defined_hooks(module_name: str) -> dict[str, object]:
    module = importlib.import_module(module_name)
    return {
        name: fn
        for name, fn in vars(module).items()
        if inspect.isfunction(fn)
        and fn.__module__ == module_name
        and hasattr(fn, f"{sdk.hookspecs.PROJECT}_spec")
    }


def test_every_hook_of_a_group_module_is_a_hook_pluggy_reads():
    """A hook added to a group module but not imported into sdk.hookspecs would be unknown to
    pluggy: a plugin implementing it would be unavailable ("unknown hook")."""
    defined = {}
    for module_name in HOOK_MODULES:
        hooks = _defined_hooks(module_name)
        assert hooks, f"{module_name} defines no hook"
        assert not set(hooks) & set(defined), f"{module_name} defines a hook twice"
        defined.update(hooks)
    pm = pluggy.PluginManager(sdk.hookspecs.PROJECT)
    pm.add_hookspecs(sdk.hookspecs)
    read = {name for name in dir(pm.hook) if name.startswith("sdk_")}
    assert read == set(defined), (
        f"hooks defined but not imported into sdk/hookspecs.py: {sorted(set(defined) - read)}"
    )
    assert all(getattr(sdk.hookspecs, name) is fn for name, fn in defined.items())
    assert set(sdk.hookspecs.__all__) == set(defined) | {"hookspec", "PROJECT"}


def test_every_name_of_sdk_plugin_before_the_split_imports_from_it():
    missing = [name for name in PLUGIN_NAMES if not hasattr(sdk.plugin, name)]
    assert not missing, f"sdk.plugin lost {missing}"
    for name in PLUGIN_NAMES:
        if name in sdk.__all__:
            assert getattr(sdk, name) is getattr(sdk.plugin, name), name
