"""Issue 48: a plugin may declare its options as a frozen dataclass of its own
(``PluginInfo(options=MyOptions)``, ``sdk.option`` for a field's doc): each field becomes an
option whose value the core checks against the field's type, an unknown option is rejected
with the list of known ones, and every hook gets ``ctx.plugin_options`` as an instance of the
plugin's class. ``OptionSpec`` dicts keep working (tests/core/test_options.py)."""

from __future__ import annotations

import dataclasses
import pickle
import typing
from dataclasses import dataclass

import pytest
import torch

import sdk
from sdk.plugins import cpu_cpp

VENDOR = """
from dataclasses import dataclass

import sdk
from sdk.plugins.cpu_cpp import sdk_cache_key, sdk_compile_kernels  # noqa: F401
from sdk.plugins import cpu_cpp as _cpu

SEEN = []


@dataclass(frozen=True)
class TunedOptions:
    unroll: int = sdk.option(1, "unroll factor", examples=(2,))
    scale: float | None = sdk.option(None, "a scale, or None")

    def doubled(self):
        return 2 * self.unroll


@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name="tuned", version="1.0", hook_api=6, device_types=("cpu",), options=TunedOptions
    )


@sdk.hookimpl
def sdk_render_kernel(ctx, kernel):
    SEEN.append(ctx)
    return _cpu.sdk_render_kernel(ctx=ctx, kernel=kernel)
"""


@pytest.fixture
def tuned(make_plugin, fake_dist, use_registry):
    mod = make_plugin(VENDOR, name="tuned", head=False)
    use_registry(fake_dist("tuned-sdk-plugin", {"tuned": mod}))
    return __import__(mod)


def _f(x):
    return (x.sin() * 2).sum(-1)


def test_a_plugin_s_options_dataclass_reaches_its_hooks_as_an_instance(tuned):
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    out = torch.compile(_f, backend=sdk.backend("tuned", unroll=4, scale=0.5))(x)
    torch.testing.assert_close(out, _f(x))
    own = tuned.SEEN[0].plugin_options
    assert isinstance(own, tuned.TunedOptions) and isinstance(own, sdk.PluginOptions)
    assert (own.unroll, own.scale, own.doubled()) == (4, 0.5, 8)  # (its methods too)
    assert own.as_dict() == {"unroll": 4, "scale": 0.5}
    assert tuned.SEEN[0].options["unroll"] == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        own.unroll = 5
    again = pickle.loads(pickle.dumps(own))
    assert again == own and isinstance(again, tuned.TunedOptions) and again.hash() == own.hash()


def test_an_options_dataclass_s_fields_are_the_option_specs(tuned):
    info = tuned.sdk_plugin_info()
    assert info.options_class is tuned.TunedOptions
    assert info.options["unroll"] == sdk.OptionSpec(1, "unroll factor", int, (2,))
    assert info.options["scale"] == sdk.OptionSpec(None, "a scale, or None", (float, type(None)))


def test_an_options_dataclass_value_of_the_wrong_type_names_the_option_and_the_type(tuned):
    with pytest.raises(
        sdk.OptionError, match=r"option 'unroll' for sdk:tuned must be int, got str"
    ):
        sdk.backend("tuned", unroll="4")
    with pytest.raises(sdk.OptionError, match=r"option 'scale' for sdk:tuned must be float or "):
        sdk.backend("tuned", scale="big")
    with pytest.raises(
        sdk.OptionError, match=r"(?s)unknown option 'unrol'.*\n  unroll \(default 1\)"
    ):
        sdk.backend("tuned", unrol=4)


def _info(options: type) -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name="bad", version="1", hook_api=6, device_types=("cpu",), options=options
    )


def test_an_options_dataclass_that_cannot_be_checked_is_an_error_naming_the_field():
    @dataclass(frozen=True)
    class WrongDefault:
        unroll: int = sdk.option("1", "unroll factor")

    with pytest.raises(
        ValueError, match=r"option 'unroll' of WrongDefault defaults to '1', a str, not int"
    ):
        _info(WrongDefault)

    @dataclass(frozen=True)
    class Unchecked:
        mode: typing.Literal["a", "b"] = "a"

    with pytest.raises(ValueError, match=r"option 'mode' of Unchecked is annotated .*Literal"):
        _info(Unchecked)

    @dataclass(frozen=True)
    class NoDefault:
        unroll: int

    with pytest.raises(ValueError, match=r"option 'unroll' of NoDefault has no default"):
        _info(NoDefault)

    @dataclass
    class Mutable:
        unroll: int = 1

    with pytest.raises(ValueError, match=r"Mutable must be declared @dataclass\(frozen=True\)"):
        _info(Mutable)


def test_cpu_cpp_declares_its_options_as_a_dataclass():
    info = cpu_cpp.sdk_plugin_info()
    assert info.options_class is cpu_cpp.CppOptions
    assert info.options["extra_flags"].type is tuple
    with pytest.raises(
        sdk.OptionError, match=r"option 'extra_flags' for sdk:cpu_cpp must be tuple"
    ):
        sdk.backend("cpu_cpp", extra_flags="-O2")
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    backend = sdk.backend("cpu_cpp", extra_flags=("-fno-unroll-loops",), cache=False)
    torch.testing.assert_close(torch.compile(_f, backend=backend)(x), _f(x))
