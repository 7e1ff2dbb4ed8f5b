"""Hook API 6: ``sdk.Capability`` keeps what the core enforces; what a plugin prefers is
``sdk.Preferences``, the answer of ``sdk_preferences``; the members that changed nothing are
gone. A plugin written for hook API 5 or earlier loads and compiles as before: a preference it
declares as a ``Capability`` member is still its preference (one warning names the fix), and a
retired name it reads still resolves."""

from __future__ import annotations

import warnings

import pytest
import torch

import sdk

#: a product with a bias read by a pointwise op: ``mm_bias_into_kernel`` rewrites it only
#: for a plugin preferring ``mm_bias_in_kernel``
_LINEAR = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())

_BODY = """
import torch
import sdk
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

SEEN = {{}}

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name={name!r}, version="0.1", hook_api={api}, device_types=("cpu",),
        capabilities=frozenset({{{caps}}}),
    )

@sdk.hookimpl
def sdk_op_support(ctx, op, node):
    SEEN["fp64"] = ctx.has(sdk.Capability.FP64)  # a retired name, read as before
    SEEN["preferences"] = ctx.preferences
    return None
"""

_PREFERENCES = """
@sdk.hookimpl
def sdk_preferences():
    return sdk.Preferences(mm_bias_in_kernel=True, cheap_transcendentals=True)
"""


def _load(make_plugin, fake_dist, use_registry, name: str, api: int, caps: str, extra: str = ""):
    module = make_plugin(_BODY.format(name=name, api=api, caps=caps) + extra, head=False)
    reg = use_registry(fake_dist(f"{name}-sdk-plugin", {name: module}))
    return reg, __import__(module)


def _passes(name: str) -> dict[str, int]:
    with torch.no_grad():
        report = sdk.explain(_LINEAR, torch.randn(4, 8), backend=f"sdk:{name}", fallback=False)
    (graph,) = report.graphs
    return {p.name: p.rewrites for p in graph.passes}


def test_an_api5_plugin_declaring_old_members_keeps_its_preferences(
    make_plugin, fake_dist, use_registry
):
    caps = (
        "sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE, sdk.Capability.FP64, "
        "sdk.Capability.BF16, sdk.Capability.MM_BIAS_IN_KERNEL, "
        "sdk.Capability.CHEAP_TRANSCENDENTALS"
    )
    with pytest.warns(sdk.SDKDeprecationWarning) as caught:
        reg, plugin = _load(make_plugin, fake_dist, use_registry, "oldie", 5, caps)
    messages = [str(w.message) for w in caught if issubclass(w.category, sdk.SDKDeprecationWarning)]
    assert len(messages) == 1, messages
    (message,) = messages
    for fix in (
        "Capability.MM_BIAS_IN_KERNEL",
        "Capability.FP64",
        "sdk.Preferences(cheap_transcendentals=True, mm_bias_in_kernel=True)",
        "sdk_preferences",
        "hook_api=6",
    ):
        assert fix in message, (fix, message)
    assert reg.status("oldie") is None, reg.status("oldie")
    want = sdk.Preferences(mm_bias_in_kernel=True, cheap_transcendentals=True)
    assert reg.record("oldie").preferences == want
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # compiling warns no more
        passes = _passes("oldie")
    assert passes.get("mm_bias_into_kernel") == 1, passes
    assert {"fp64": True, "preferences": want} == plugin.SEEN


def test_an_api6_plugin_states_its_preferences_through_the_hook(
    make_plugin, fake_dist, use_registry
):
    caps = "sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg, plugin = _load(make_plugin, fake_dist, use_registry, "newer", 6, caps, _PREFERENCES)
        want = sdk.Preferences(mm_bias_in_kernel=True, cheap_transcendentals=True)
        assert reg.record("newer").preferences == want
        assert _passes("newer").get("mm_bias_into_kernel") == 1
    assert {"fp64": False, "preferences": want} == plugin.SEEN


def test_without_the_preference_the_pass_does_not_run(make_plugin, fake_dist, use_registry):
    caps = "sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE"
    _load(make_plugin, fake_dist, use_registry, "plain", 6, caps)
    assert "mm_bias_into_kernel" not in _passes("plain")


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ("", "declares Capability.CHANNELS_LAST, which hook API 6 retired"),
        (
            "\n@sdk.hookimpl\ndef sdk_preferences():\n    return {'channels_last': True}\n",
            "returned dict, not sdk.Preferences",
        ),
    ],
    ids=["retired member", "not a Preferences"],
)
def test_an_api6_plugin_with_a_retired_member_or_a_bad_answer_is_unavailable(
    extra, why, make_plugin, fake_dist, use_registry
):
    caps = "sdk.Capability.CHANNELS_LAST" if not extra else ""
    reg, _ = _load(make_plugin, fake_dist, use_registry, "strict6", 6, caps, extra)
    status = reg.status("strict6")
    assert status is not None and why in status, status
    if not extra:
        assert "sdk.Preferences(channels_last=True)" in status, status


def test_capability_keeps_only_what_the_core_enforces():
    assert {c.name for c in sdk.Capability} == {
        "REDUCTIONS",
        "MULTI_STAGE",
        "STORE_THEN_LOAD",
        "SYMBOLIC_SIZES",
        "GRAPH_CAPTURE",
    }
    # a retired name resolves (old plugins import), but is no member, and nothing else does
    assert sdk.Capability.FP64 == "fp64" and sdk.Capability.FP64 not in set(sdk.Capability)
    with pytest.raises(AttributeError):
        sdk.Capability.NO_SUCH_THING  # noqa: B018
    with pytest.raises(TypeError, match="True or False"):
        sdk.Preferences(channels_last=1)
    assert sdk.HOOK_API_VERSION == 8 and sdk.__version__ == "0.6.0"
