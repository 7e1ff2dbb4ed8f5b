"""The memo of torch's AOTAutograd keys (core/adapters/aot_cache.py, ``memo_digest``): a warm
process takes a graph's key from it only where everything the key is computed from is the
same. Each case here changes one thing torch's key reads and expects another digest; a graph
whose key reads more than the digest sees is not remembered at all. (That a remembered key
is the key torch computes in a later process: tests/core/test_warm_start.py.)"""

from __future__ import annotations

import contextlib

import pytest
import torch

from sdk.core.adapters import aot_cache


def _capture(fn, *args):
    """The Dynamo graph of ``fn(*args)`` and its example inputs."""
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, fullgraph=True)(*args)
    (graph,) = seen
    return graph


def _mlp(x, w):
    return torch.relu(x @ w).sum()


def _digest(fn=_mlp, *args):
    args = args or (torch.randn(4, 8), torch.randn(8, 3, requires_grad=True))
    gm, inputs = _capture(fn, *args)
    return aot_cache.memo_digest(gm, inputs, None)


def test_the_same_graph_and_state_is_the_same_digest():
    first = _digest()
    assert first is not None
    assert _digest() == first  # a new capture, new tensors of the same kind


@pytest.mark.parametrize(
    "change",
    [
        "shape",
        "dtype",
        "requires_grad",
        "code",
        "grad_mode",
        "deterministic",
        "autocast",
        "cache_key_tag",
        "functorch_config",
        "inductor_config",
        "default_dtype",
    ],
)
def test_each_thing_torch_s_key_reads_changes_the_digest(change):
    base = _digest()
    x, w = torch.randn(4, 8), torch.randn(8, 3, requires_grad=True)
    fn = _mlp
    state: contextlib.AbstractContextManager = contextlib.nullcontext()
    if change == "shape":
        x = torch.randn(5, 8)
    elif change == "dtype":
        x, w = x.double(), w.detach().double().requires_grad_()
    elif change == "requires_grad":
        w = w.detach()
    elif change == "code":

        def fn(x, w):
            return torch.tanh(x @ w).sum()

    elif change == "grad_mode":
        state = torch.no_grad()
    elif change == "deterministic":
        state = _setting(
            torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms, True
        )
    elif change == "autocast":
        state = torch.autocast("cpu", dtype=torch.bfloat16)
    elif change == "cache_key_tag":
        state = torch.compiler.config.patch(cache_key_tag="another backend")
    elif change == "functorch_config":
        import torch._functorch.config as functorch_config

        state = functorch_config.patch(activation_memory_budget=0.5)
    elif change == "inductor_config":
        import torch._inductor.config as inductor_config

        state = inductor_config.patch(fallback_random=not inductor_config.fallback_random)
    elif change == "default_dtype":
        state = _setting(torch.get_default_dtype, torch.set_default_dtype, torch.float64)
    gm, inputs = _capture(fn, x, w)
    with state:
        changed = aot_cache.memo_digest(gm, inputs, None)
    assert changed is not None and changed != base


@contextlib.contextmanager
def _setting(get, set_, value):
    """A torch global set to ``value`` within the block (``get``/``set_``: its accessors)."""
    before = get()
    set_(value)
    try:
        yield
    finally:
        set_(before)


@torch.library.custom_op("sdktest_memo::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


def test_a_graph_with_a_custom_op_is_not_remembered():
    """Torch's key reads the Triton kernels registered for a custom op, which the digest
    does not see: its key is computed every time."""
    gm, inputs = _capture(lambda x: _twice(x).sum(), torch.randn(3))
    assert aot_cache.memo_digest(gm, inputs, None) is None


def test_a_graph_with_a_subgraph_is_not_remembered():
    """A higher-order op's subgraph (here activation checkpointing): torch's key reads its
    context functions."""
    from torch.utils.checkpoint import checkpoint

    def fn(x, w):
        return checkpoint(_mlp, x, w, use_reentrant=False)

    gm, inputs = _capture(fn, torch.randn(4, 8), torch.randn(8, 3, requires_grad=True))
    assert aot_cache.memo_digest(gm, inputs, None) is None


def test_the_installed_files_stand_in_for_torch_s_source_digest(tmp_path):
    """A file of torch's package changed in place (same version) changes what stands for
    its source digest, as torch's own key would change."""
    (tmp_path / "a.py").write_text("x = 1\n")
    before = aot_cache._file_stats(str(tmp_path))
    (tmp_path / "a.py").write_text("x = 22\n")
    assert aot_cache._file_stats(str(tmp_path)) != before
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("")
    assert aot_cache._file_stats(str(tmp_path)) != before


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_second_compile_takes_the_key_from_the_memo_and_hits_torch_s_cache(caches, dynamic):
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))

    results = []
    for _ in range(2):  # the second: a later process, as far as the caches go
        torch._dynamo.reset()
        for p in model.parameters():
            p.grad = None
        before = dict(aot_cache.KEY_MEMO)
        hits = counters["aot_autograd"]["autograd_cache_hit"]
        compiled = torch.compile(model, backend="sdk:cpu_cpp", dynamic=dynamic)
        loss = compiled(torch.randn(5, 6, generator=torch.Generator().manual_seed(1))).sum()
        loss.backward()
        results.append([loss.detach(), *(p.grad.clone() for p in model.parameters())])
        memo = {k: aot_cache.KEY_MEMO[k] - before[k] for k in before}
        hit = counters["aot_autograd"]["autograd_cache_hit"] - hits
        results[-1].append((memo, hit))
    (*first, (memo1, hit1)), (*second, (memo2, hit2)) = results
    assert (memo1, hit1) == ({"remembered": 0, "computed": 1}, 0)
    assert (memo2, hit2) == ({"remembered": 1, "computed": 0}, 1)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


def test_a_memo_that_cannot_be_read_or_written_costs_nothing_but_the_key(monkeypatch):
    """A refused cache directory (PermissionError from the SDK's cache) means torch's key,
    computed as it always is; never a failed lookup (which torch would turn into a bypass)."""

    class Refused:
        def get(self, digest):
            raise PermissionError("the SDK's cache directory is writable by others")

        def put(self, digest, data):
            raise PermissionError("the SDK's cache directory is writable by others")

    gm, inputs = _capture(_mlp, torch.randn(4, 8), torch.randn(8, 3, requires_grad=True))
    monkeypatch.setattr(aot_cache, "_original_key", lambda *a, **k: ("torch's key", []))
    token = aot_cache._memo.set(Refused())
    try:
        assert aot_cache._remembered_key(gm, inputs, None) == ("torch's key", [])
    finally:
        aot_cache._memo.reset(token)
