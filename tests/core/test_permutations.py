"""Accumulations through a permutation's indices (core/passes/permutations.py).

A mixture-of-experts layer (HF transformers' grouped form) sorts its tokens by expert,
gathers rows through the sort's indices, through those indices floor-divided by the top-k,
and through their inverse. Each backward accumulates through the same indices. The pass
writes those accumulations as writes that never meet (and a fixed-order sum over the k
copies), which ``sdk.explain`` reports per graph. Each case is compared with eager on fresh
random inputs, forward and gradients, fp32 and bf16; cases whose indices do not show a
permutation keep their accumulation, and stay right.
"""

from __future__ import annotations

import pytest
import torch

import sdk
from tests.plugins_under_test import PLUGINS, device_of

PASS = "accumulate_over_permutations"


def _moe(x, router, w1, w2, k=2):
    """Top-k routing, tokens sorted by expert, one weight per expert row block, unsorted."""
    tokens, hidden = x.shape
    # (routed in fp32, as HF's routers do: in bf16 two experts' scores often tie, and eager
    # and the compiled softmax, a rounding apart, would break the tie two ways)
    scores = torch.softmax((x @ router).float(), dim=-1)
    top_w, top_i = torch.topk(scores, k, dim=-1)
    weights = top_w.reshape(-1).to(x.dtype)
    experts, perm = torch.sort(top_i.reshape(-1))
    picked = x[perm // k]  # (tokens * k, hidden)
    h = torch.relu(torch.einsum("sh,shf->sf", picked, w1[experts]))
    out = torch.einsum("sf,sfh->sh", h, w2[experts]) * weights[perm].unsqueeze(-1)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.size(0), device=perm.device)
    return out[inv].view(tokens, k, hidden).sum(1)


def _rewrites(report) -> dict[str, int]:
    return {g.kind: sum(p.rewrites for p in g.passes if p.name == PASS) for g in report.graphs}


def _tolerances(dtype):
    # bf16: the experts' weight gradients sum about 48 rows each; eager's CPU index_put rounds to
    # bf16 after every add, the sdk adds in float32 and rounds once (as on CUDA): up to a
    # rounding or two of eager's apart (test_index_add_in_place.py's bf16 bounds)
    return {} if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-1)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_mixture_of_experts_backward_accumulates_without_sorting(plugin, dtype):
    dev = device_of(plugin)
    tokens, hidden, experts, ffn = 96, 16, 4, 24  # 192 routed rows: above the one-hot form's 64
    g = torch.Generator().manual_seed(0)

    def make(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dev, dtype)

    args = [
        make(tokens, hidden),
        make(hidden, experts),
        make(experts, hidden, ffn, scale=0.3),
        make(experts, ffn, hidden, scale=0.3),
    ]
    mine = [a.clone().requires_grad_() for a in args]
    ref = [a.clone().requires_grad_() for a in args]
    fn = torch.compile(_moe, backend=sdk.backend(plugin, fallback=False))
    up = make(tokens, hidden)
    got = fn(*mine)
    (got * up).sum().backward()
    want = _moe(*ref)
    (want * up).sum().backward()
    tol = _tolerances(dtype)
    torch.testing.assert_close(got, want, **tol)
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a.grad, b.grad, **tol)
    again = [a.clone().requires_grad_() for a in args]
    (fn(*again) * up).sum().backward()
    # no atomics: the same bits every run. (cuda_triton on CPU tensors, under Triton's
    # interpreter, leaves the experts' weights to the CPU's ATen index_put, which adds in a
    # thread-dependent order: its check is the gradients the rewrite reaches)
    reached = 2 if plugin == "cuda_triton" and dev == "cpu" else len(args)
    for a, b in zip(mine[:reached], again[:reached]):
        assert torch.equal(a.grad, b.grad)

    report = sdk.explain(
        lambda *a: (_moe(*a) * up).sum(),
        *[a.clone().requires_grad_() for a in args],
        backend=f"sdk:{plugin}",
        fallback=False,
    )
    # the backward's three: through perm (the weights), perm // k (the tokens) and inv
    assert _rewrites(report) == {"forward": 0, "backward": 3}, report


def test_symbolic_token_counts_keep_the_rewrite():
    """Under ``dynamic=True`` the token count is a symbol: the rows of ``p // k`` are
    compared as expressions (no guard), and one compile serves every count."""
    torch.manual_seed(0)
    weights = [torch.randn(8, 4), torch.randn(4, 8, 12) * 0.3, torch.randn(4, 12, 8) * 0.3]
    fn = torch.compile(_moe, backend=sdk.backend("cpu_cpp", fallback=False), dynamic=True)
    with sdk.collect_reports() as reports:
        for tokens in (70, 133):
            x = torch.randn(tokens, 8)
            mine = [t.clone().requires_grad_() for t in (x, *weights)]
            ref = [t.clone().requires_grad_() for t in (x, *weights)]
            fn(*mine).pow(2).sum().backward()
            _moe(*ref).pow(2).sum().backward()
            for a, b in zip(mine, ref):
                torch.testing.assert_close(a.grad, b.grad)
    assert [g.kind for g in reports.graphs] == ["forward", "backward"]
    assert _rewrites(reports) == {"forward": 0, "backward": 3}


def _check(fn, args, plugin, rewrites):
    got = torch.compile(fn, backend=sdk.backend(plugin, fallback=False))(*args)
    torch.testing.assert_close(got, fn(*args))
    report = sdk.explain(fn, *args, backend=f"sdk:{plugin}", fallback=False)
    assert _rewrites(report) == {"inference": rewrites}, report


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize(
    ("rows", "width"),
    [(300, 5), (410, 5), (300, 1)],  # every row reached (a gather); not; values broadcast
)
def test_an_accumulation_into_a_tensor_through_a_permutation(plugin, rows, width):
    dev = device_of(plugin)
    x, keys = torch.randn(rows, 5, device=dev), torch.randn(300, 5, device=dev)
    v = torch.randn(300, width, device=dev)

    def fn(x, keys, v):
        perm = torch.argsort(keys[:, 0])
        base = x * 2 if width > 1 else torch.zeros_like(x)  # (zeros: the values alone)
        return torch.index_put(base, (perm,), v, accumulate=True)

    _check(fn, (x, keys, v), plugin, 1)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_routed_accumulation_sums_its_k_copies_in_a_fixed_order(plugin):
    dev = device_of(plugin)
    x, keys, v = torch.randn(100, 3, device=dev), torch.randn(300, device=dev), None
    v = torch.randn(300, 3, device=dev)

    def fn(x, keys, v):
        perm = torch.sort(keys).indices
        return torch.index_put(x, (perm // 3,), v, accumulate=True)

    _check(fn, (x, keys, v), plugin, 1)


def _not_shown(x, keys, v):
    # 2-d sorts, a random index, and a floor division whose rows are not the sort's length
    # over k: none shows distinct indices
    rows = torch.sort(keys.view(30, 10), dim=1).indices.reshape(-1)
    random = (keys * 1000).long().abs() % x.shape[0]
    wide = torch.sort(keys).indices // 2
    out = torch.index_put(x, (rows,), v, accumulate=True)
    out = torch.index_put(out, (random,), v, accumulate=True)
    return torch.index_put(out, (wide % x.shape[0],), v, accumulate=True)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_indices_that_do_not_show_a_permutation_keep_their_accumulation(plugin):
    dev = device_of(plugin)
    x, keys, v = torch.randn(100, 4, device=dev), torch.randn(300, device=dev), None
    v = torch.randn(300, 4, device=dev)
    _check(_not_shown, (x, keys, v), plugin, 0)
