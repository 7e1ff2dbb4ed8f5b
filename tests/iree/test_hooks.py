"""The hook API 3 hooks called directly, the way the core calls them."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

pytest.importorskip(
    "iree_sdk_plugin",
    reason="the IREE plugin wheel is not installed: pip install ./examples/iree_vendor",
)

import iree_sdk_plugin as plugin

import sdk

from .test_compiler import _inputs, _mlp_step

CTX = sdk.CompileContext(
    plugin="iree_cpu",
    device_type="cpu",
    graph_kind="forward",
    graph_name="g",
    options={},
    capabilities=frozenset(),
)


def test_info_declares_a_graph_plugin_of_hook_api_3():
    info = plugin.sdk_plugin_info()
    assert (info.name, info.kind, info.hook_api) == ("iree_cpu", sdk.PluginKind.GRAPH, 3)


def test_claims_say_why_an_op_is_refused():
    def step(x, w, b):
        out = torch.nn.functional.layer_norm(x @ x.T, (4,), w, b)
        return torch.autograd.grad(out.sum(), (x, w, b))

    gm = make_fx(step)(*(torch.randn(*s, requires_grad=True) for s in ((4, 4), (4,), (4,))))
    claims = {n.target: s for n, s in plugin.sdk_claim_nodes(CTX, gm).items()}
    assert claims[torch.ops.aten.mm.default].ok
    refusal = claims[torch.ops.aten.native_layer_norm_backward.default]
    assert not refusal.ok and "does not lower" in refusal.reason


def test_compiled_subgraph_and_its_cached_artifact_match_eager():
    gm = make_fx(_mlp_step)(*_inputs())
    compiled = plugin.sdk_compile_subgraph(CTX, gm, ())
    assert compiled.artifact and plugin.sdk_cache_key(CTX)
    reloaded = plugin.sdk_load_subgraph(CTX, compiled.artifact)
    args = _inputs()
    want = _mlp_step(*args)
    for fn in (compiled.fn, reloaded):
        for got, ref in zip(fn(*args), want, strict=True):
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
