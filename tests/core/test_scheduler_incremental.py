"""The fusion loop keeps its candidate pairs and group graph up to date at each merge
instead of rebuilding them from every member's reads; what it keeps must equal a rebuild.

A transformer block's training step (layer norm, attention with softmax, GELU MLP,
residuals: a few hundred merges over forward and backward) is compiled with every
merge checked against a fresh rebuild, and its results against eager.
"""

from __future__ import annotations

import pytest
import torch

import sdk
from sdk.core import scheduler
from tests.plugins_under_test import PLUGINS, device_of


class Block(torch.nn.Module):
    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).unbind(2)
        att = torch.einsum("bqhd,bkhd->bhqk", q, k) / (d // self.heads) ** 0.5
        y = torch.einsum("bhqk,bkhd->bqhd", att.softmax(-1), v).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


@pytest.mark.parametrize("plugin", PLUGINS)
def test_kept_pairs_and_graph_equal_a_rebuild(plugin, monkeypatch):
    merges = []
    update_pairs, contract = scheduler.Scheduler._update_pairs, scheduler.Scheduler._contract

    def checked_contract(self, a, b, g):
        contract(self, a, b, g)
        assert self._succ == self._successors(self._owner())

    def checked_update(self, pairs, a, b, g, owner):
        update_pairs(self, pairs, a, b, g, owner)
        assert owner == self._owner()
        assert pairs == self._pairs(self._owner())
        merges.append(g.id)

    monkeypatch.setattr(scheduler.Scheduler, "_contract", checked_contract)
    monkeypatch.setattr(scheduler.Scheduler, "_update_pairs", checked_update)
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = Block().to(dev)
    compiled = torch.compile(model, backend=sdk.backend(plugin, fallback=False))
    x = torch.randn(2, 8, 32, device=dev, requires_grad=True)
    _matches_eager(compiled, model, x, grad_atol=1e-5)
    assert len(merges) > 20, merges


def _matches_eager(compiled, model: torch.nn.Module, x: torch.Tensor, grad_atol: float) -> None:
    """``compiled`` gives ``model``'s output for ``x``, and its gradients for ``x`` and
    every parameter."""
    got, want = compiled(x), model(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    gw = torch.autograd.grad(got.sum(), [x, *model.parameters()])
    ge = torch.autograd.grad(want.sum(), [x, *model.parameters()])
    for g, e in zip(gw, ge):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=grad_atol)


class SqueezeExcite(torch.nn.Module):
    """MobileNetV3's squeeze-excitation gate, ``hardsigmoid(s) * x``, after a depthwise conv,
    batch norm (training) and hardswish."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(c // 2, c, 3, padding=1, groups=c // 2, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)
        self.fc1 = torch.nn.Conv2d(c, c // 4, 1)
        self.fc2 = torch.nn.Conv2d(c // 4, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.hardswish(self.bn(self.dw(x)))
        s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        s = self.fc2(torch.relu(self.fc1(s)))
        return torch.nn.functional.hardsigmoid(s) * x


@pytest.mark.parametrize("plugin", PLUGINS)
def test_no_cycle_through_an_extern_after_merges(plugin):
    """The gate's backward holds a group whose earliest member comes before a node that also
    feeds it through two convolution backwards (externs). Fusing that node in would form a
    cycle: the legality check must look for a path both ways, because a merged group's order
    (its earliest member's) no longer says which of two groups runs first. Before, the whole
    backward fell back to ATen ("scheduler produced a dependency cycle"), as on torchvision's
    mobilenet_v3_large training step."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = SqueezeExcite().to(dev)
    compiled = torch.compile(model, backend=sdk.backend(plugin, fallback=False))
    x = torch.randn(2, 8, 8, 8, device=dev, requires_grad=True)
    got = compiled(x)
    got.sum().backward()
    got_grads = [x.grad] + [p.grad for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    want = model(x)
    want.sum().backward()
    want_grads = [x.grad] + [p.grad for p in model.parameters()]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


class PermutedBlock(torch.nn.Module):
    """timm's ConvNeXt block in its permute form (NCHW -> NHWC, LayerNorm and MLP over the
    channels, back to NCHW) after a depthwise conv: members whose loops are a permutation
    of their group's take their mapping from how other members read them."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.ln = torch.nn.LayerNorm(c)
        self.fc1, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
        self.gamma = torch.nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvBatchNorm(torch.nn.Module):
    """Convolution, BatchNorm in training and ReLU: the backward's reductions over the
    leading dims read their producers transposed (members of the "permuted" kind, whose
    mapping other members decide)."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x)).relu() + x


@pytest.mark.parametrize(
    "make, shape",
    [
        (Block, (2, 8, 32)),
        (SqueezeExcite, (2, 8, 8, 8)),
        (PermutedBlock, (2, 16, 6, 6)),
        (ConvBatchNorm, (2, 8, 6, 6)),
    ],
    ids=["transformer", "squeeze_excite", "convnext_permute", "batch_norm"],
)
def test_trials_sharing_the_search_s_memo_resolve_as_a_fresh_builder(make, shape, monkeypatch):
    """The fusion search's trial builds share a memo (``builder.Memo``): a node's own
    mapping, its value under a mapping, that value with its reads resolved (keyed by the
    members it reads and their reductions' store indices), indices under a mapping. Every
    trial is built again with an empty memo: the verdict, each member's resolved value and
    the reduction stages must be the same."""
    from sdk.core.scheduler import builder as builder_mod

    legal = scheduler.Scheduler._legal
    trials = []

    def compared(self, a, b, owner):
        why = legal(self, a, b, owner)
        kept, shared = self._trial, self._memo
        self._memo = builder_mod.Memo()
        try:
            assert legal(self, a, b, owner) == why
            if why is None:
                (_, mine), (_, fresh) = kept, self._trial
                members = kept[0].members
                assert [mine.resolved(n) for n in members] == [fresh.resolved(n) for n in members]
                assert mine.levels() == fresh.levels()
        finally:
            self._memo, self._trial = shared, kept
        trials.append(why)
        return why

    monkeypatch.setattr(scheduler.Scheduler, "_legal", compared)
    torch.manual_seed(0)
    model = make()
    compiled = torch.compile(model, backend=sdk.backend("cpu_cpp", fallback=False))
    x = torch.randn(*shape, requires_grad=True)
    _matches_eager(compiled, model, x, grad_atol=1e-4)
    assert sum(why is None for why in trials) > 10, trials


def test_a_linear_index_s_coefficients_are_computed_once():
    """The fusion search asks ``_coefficients`` of the same few indices thousands of times
    (a ResNet-50 training step: over 27,000 calls). A function added under its cache's
    decorator once left it uncached: that step's schedule took 6.6 s instead of 4.4 s on
    a 2-core CPU, with byte-identical kernels."""
    from sdk.core.scheduler import builder

    x0, x1, x2 = builder.var("x0"), builder.var("x1"), builder.var("x2")
    wanted = frozenset({x0, x1, x2})
    builder._coefficients.cache_clear()
    first = builder._coefficients(3072 * x0 + 64 * x1 + x2, wanted)
    again = builder._coefficients(3072 * x0 + 64 * x1 + x2, wanted)
    assert first == again == ((x0, 3072), (x1, 64), (x2, 1))
    assert builder._coefficients.cache_info().hits == 1
