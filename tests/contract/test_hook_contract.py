"""The hook contract as ``sdk/hookspecs.py`` states it: each hook documents its parameters,
its return and the hook-API version it appeared in; the public types read as documented
(``Support``, ``Capability``, ``TensorValue``); and the error contract of the module
docstring holds, for plugins written as a vendor would write them."""

from __future__ import annotations

import importlib
import inspect
import re
import warnings

import pytest
import torch

import sdk
import sdk.hookspecs
from sdk import ir

HOOKS = [getattr(sdk.hookspecs, n) for n in dir(sdk.hookspecs) if n.startswith("sdk_")]


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.__name__)
def test_every_hook_documents_its_parameters_return_and_version(hook):
    doc = inspect.getdoc(hook)
    missing = [p for p in inspect.signature(hook).parameters if f":param {p}:" not in doc]
    assert not missing, f"{hook.__name__}: no :param line for {missing}"
    assert ":return:" in doc, hook.__name__
    version = re.search(r"(?:API version: |hook-API version )(\d+)", doc)
    assert version and 1 <= int(version[1]) <= sdk.HOOK_API_VERSION, hook.__name__


def test_the_docs_name_classes_that_exist():
    """``sdk_on_graph_compiled`` named ``sdk.explain.GraphReport``, which does not exist."""
    for hook in HOOKS:
        for dotted in re.findall(r":class:`(sdk\.[\w.]+)`", inspect.getdoc(hook)):
            owner, _, name = dotted.rpartition(".")
            assert hasattr(importlib.import_module(owner), name), (hook.__name__, dotted)


def test_package_docstring_writes_hook_api_as_a_literal():
    """The vendor guide forbids ``hook_api=sdk.HOOK_API_VERSION`` (the check would always pass)."""
    assert "hook_api=sdk.HOOK_API_VERSION" not in sdk.__doc__
    assert re.search(r"hook_api=\d+", sdk.__doc__)


def test_every_capability_says_what_declaring_it_does():
    docs = {c: c.__doc__ for c in sdk.Capability}
    assert all(d and d != sdk.Capability.__doc__ for d in docs.values()), docs
    assert len(set(docs.values())) == len(docs)
    assert all(sdk.Capability(c.value) is c for c in sdk.Capability)  # values unchanged


def test_tensor_value_shows_sizes_and_dtype():
    assert {"sizes", "dtype", "ndim", "load"} <= set(dir(ir.TensorValue))
    assert ir.TensorValue.sizes.__doc__ and ir.TensorValue.dtype.__doc__


VETO = """
import sdk
# this vendor renders with the C++ plugin's code generator
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(name="veto", version="1.0", hook_api=1, device_types=("cpu",))

@sdk.hookimpl
def sdk_can_fuse(first, second):
    return ANSWER
"""


@pytest.mark.parametrize("answer", ["sdk.Verdict.no", "sdk.Support.no"])
def test_a_veto_answered_with_the_removed_verdict_still_vetoes(
    answer, make_plugin, fake_dist, use_registry
):
    """``sdk.Verdict``, removed in hook API 6, still resolves (to ``sdk.Support``, with an
    ``sdk.SDKDeprecationWarning`` naming it), so a plugin written for hook API 1 that answers
    ``sdk_can_fuse`` with ``Verdict.no`` vetoes as one answering ``Support.no`` does."""
    with pytest.warns(sdk.SDKDeprecationWarning, match=r"sdk\.Verdict .* sdk\.Support"):
        assert sdk.Verdict is sdk.Support
    assert "Verdict" not in sdk.__all__
    src = VETO.replace("ANSWER", f'{answer}("the vendor fuses nothing")')
    use_registry(fake_dist("veto-sdk-plugin", {"veto": make_plugin(src, head=False)}))
    x = torch.randn(8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sdk.SDKDeprecationWarning)  # (checked above)
        report = sdk.explain(lambda x: (x * 2).sin() + 1, x, backend="sdk:veto")
    assert len(report.kernels) == 3 and not report.fallbacks, str(report)
    reasons = [r.reason for g in report.graphs for r in g.fusion_refusals]
    assert any("the vendor fuses nothing" in r for r in reasons), reasons


RAISER = """
import torch
import sdk
from sdk.plugins import cpu_cpp

#: what the hooks raise: {"lower": exception} in sdk_lower_op (for sin), {"run": exception}
#: from every compiled kernel when it runs
RAISE = {}

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(name="raiser", version="1.0", hook_api=1, device_types=("cpu",))

@sdk.hookimpl
def sdk_lower_op(op):
    if op is torch.ops.aten.sin.default and "lower" in RAISE:
        raise RAISE["lower"]
    return None

@sdk.hookimpl
def sdk_render_kernel(ctx, kernel):
    return cpu_cpp.sdk_render_kernel(ctx=ctx, kernel=kernel)

@sdk.hookimpl
def sdk_compile_kernels(ctx, sources):
    fns = cpu_cpp.sdk_compile_kernels(ctx=ctx, sources=sources)
    if "run" not in RAISE:
        return fns

    def failing(*args):
        raise RAISE["run"]

    return [failing for _ in fns]
"""


@pytest.fixture
def raiser(make_plugin, fake_dist, use_registry):
    """The plugin's ``RAISE`` table; the plugin is ``sdk:raiser``."""
    name = make_plugin(RAISER, head=False)
    use_registry(fake_dist("raiser-sdk-plugin", {"raiser": name}))
    return importlib.import_module(name).RAISE


def _sin2(x: torch.Tensor) -> torch.Tensor:
    return x.sin() * 2


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return out


def test_an_exception_in_a_compile_hook_sends_the_whole_graph_to_aten(raiser):
    raiser["lower"] = ValueError("no sin on this device")
    x = torch.randn(4, 8)
    told = "'raiser'.*in ATen instead: .*sdk_lower_op raised ValueError: no sin on this device"
    with pytest.warns(sdk.PluginFallbackWarning, match=told):
        report = sdk.explain(_sin2, x, backend="sdk:raiser")
    assert not report.kernels and len(report.fallbacks) == 2, str(report)  # sin and mul
    assert all(
        "sdk_lower_op raised ValueError: no sin on this device" in f.reason
        for f in report.fallbacks
    ), str(report)
    torch.testing.assert_close(torch.compile(_sin2, backend=sdk.backend("raiser"))(x), _sin2(x))


def test_an_sdk_error_from_a_compile_hook_reaches_the_caller(raiser):
    raiser["lower"] = sdk.SDKError("sdk:raiser cannot honour this; drop the option")
    with pytest.raises(Exception) as info:
        torch.compile(_sin2, backend=sdk.backend("raiser"))(torch.randn(4, 8))
    assert any(
        isinstance(e, sdk.SDKError) and "cannot honour this" in str(e) for e in _causes(info.value)
    ), repr(info.value)


def test_a_kernel_that_raises_where_eager_does_not_gives_way_to_aten(raiser, graph_reports):
    raiser["run"] = RuntimeError("device fault")
    x = torch.randn(4, 8)
    compiled = torch.compile(_sin2, backend=sdk.backend("raiser"))
    for _ in range(2):  # and from then on
        torch.testing.assert_close(compiled(x), _sin2(x))
    (report,) = graph_reports
    assert not report.kernels and report.fallbacks, report
    assert any("RuntimeError: device fault; ATen runs this graph" in n for n in report.notes)


def test_a_kernel_index_error_reaches_the_caller_where_eager_raises_too(raiser):
    """An out-of-range index is the input's fault: the kernel's own IndexError propagates."""
    raiser["run"] = IndexError("index 9 is out of bounds for dimension with size 4 (kernel k)")

    def gather(x, idx):
        return x[idx] * 2

    compiled = torch.compile(gather, backend=sdk.backend("raiser"))
    with pytest.raises(IndexError, match=r"\(kernel k\)$"):
        compiled(torch.randn(4, 8), torch.tensor([0, 9]))
