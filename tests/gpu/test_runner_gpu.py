"""The native runner on a GPU: cuda_triton's programs through both runners, bit for bit.

Triton kernels are launched by the runner through the CUDA driver (plugins/cuda_triton/
native.py) once their first launch loaded them; a split reduction's kernels launch as one
entry (a chain). Every graph of the GPU kernel suite, training steps in fp32 and bf16,
and reduce-overhead (the CUDA graph records the runner's launches).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import sdk
from sdk.plugins.cuda_triton import native as triton_native
from tests import models

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _same(a, b) -> None:
    flat_a, flat_b = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    assert len(flat_a) == len(flat_b)
    for x, y in zip(flat_a, flat_b, strict=True):
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert torch.equal(x.nan_to_num(), y.nan_to_num()), (x, y)
        else:
            assert x == y


def _suite():
    from sdk.tools.bench_kernels import _gpu_suite

    return sorted(_gpu_suite().items())


@pytest.fixture(autouse=True)
def _deterministic():
    """Library calls repeat their bits (attention's backward does not, by default): what
    differs between the runners is then the runner's doing."""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False


@pytest.mark.parametrize("name,build", _suite(), ids=lambda v: str(v)[:24])
def test_gpu_kernel_suite_graphs_bit_for_bit(name, build):
    got = {}
    for runner in ("python", "native"):
        torch.manual_seed(0)
        case = build(torch.device("cuda"))
        torch._dynamo.reset()
        backend = sdk.backend("cuda_triton", runner=runner, cache=False)
        compiled = torch.compile(case.target, backend=backend)
        case.step(compiled)  # the first call loads the kernels
        got[runner] = [t.clone() for _, t in case.outputs(case.step(compiled))]
    _same(got["python"], got["native"])


def _gpt2(dtype):
    model = models.gpt2(seed=0, n_embd=128, vocab_size=1024, n_positions=1024, use_cache=False)
    model = model.to("cuda", dtype).train()
    ids = torch.randint(0, 1024, (4, 64), device="cuda")

    def step(m):
        def f(ids):
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            return loss.detach()

        return f, (ids,)

    return model, step


def _convnet(dtype):
    model = models.convnet(3, 16, 16, act=(nn.ReLU, nn.GELU), seed=0).to("cuda", dtype).train()
    x = torch.randn(8, 3, 32, 32, device="cuda", dtype=dtype)

    def step(m):
        def f(x):
            loss = m(x).float().pow(2).mean()
            loss.backward()
            return loss.detach()

        return f, (x,)

    return model, step


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("build", [_gpt2, _convnet], ids=["gpt2", "convnet"])
def test_training_steps_bit_for_bit(build, dtype, mode):
    model, step = build(dtype)
    got, reports = {}, {}
    for runner in ("python", "native"):
        m = copy.deepcopy(model)
        f, args = step(m)
        torch._dynamo.reset()
        # (reduce-overhead: the cudagraphs wrapper, as the mode names it)
        wrappers = ("cudagraphs",) if mode == "reduce-overhead" else ()
        backend = sdk.backend("cuda_triton", wrappers=wrappers, runner=runner, cache=False)
        compiled = torch.compile(f, backend=backend)
        for _ in range(3):  # loads, then (reduce-overhead) records, then replays
            for p in m.parameters():
                p.grad = None
            loss = compiled(*args)
        torch.cuda.synchronize()
        got[runner] = [loss.clone(), *(p.grad.clone() for p in m.parameters()), *m.buffers()]
        reports[runner] = sdk.explain(f, *args, backend=backend)
    _same(got["python"], got["native"])
    runners = [g.runner for g in reports["native"].graphs]
    assert runners and all(r == "native" for r in runners), runners


def test_triton_kernels_launch_natively_after_their_first_launch():
    torch._dynamo.reset()
    f = torch.compile(lambda x, y: (x.sin() * y).relu() + 1, backend="sdk:cuda_triton")
    x, y = torch.randn(1000, 300, device="cuda"), torch.randn(1000, 300, device="cuda")
    before = {id(n) for n in triton_native.made}
    out = f(x, y)
    torch.testing.assert_close(out, (x.sin() * y).relu() + 1)
    new = [n for n in triton_native.made if id(n) not in before]
    assert new and all(n.ready for n in new)
    x2 = torch.randn(1000, 300, device="cuda")
    torch.testing.assert_close(f(x2, y), (x2.sin() * y).relu() + 1)  # the native launch


def _block(x: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.gelu(x * 1.5 + 1.0)
    y = torch.softmax(h, -1) + torch.nn.functional.layer_norm(h, h.shape[-1:])
    return y[::2] * y.sum(0)


_SHAPES = [(6, 40), (9, 300), (33, 2000), (6, 40), (16, 64), (9, 300)]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_split_reductions_launch_natively_as_chains(channels_last):
    """BatchNorm training over 16x56x56 per channel splits its statistics and its gradients
    (a chain of kernels each): once its kernels are loaded the runner launches each chain
    through the shim, every kernel of it in one entry, with the Python runner's bits."""
    got = {}
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    for runner in ("python", "native"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = nn.Sequential(nn.BatchNorm2d(64), nn.ReLU()).cuda().train()
        bn = model[0]
        before = {id(c) for c in triton_native.made_chains}
        backend = sdk.backend("cuda_triton", runner=runner, cache=False)
        compiled = torch.compile(model, backend=backend)
        got[runner], launched = [], []
        for i in range(3):
            torch.manual_seed(i)
            x = torch.randn(16, 64, 56, 56, device="cuda").to(memory_format=fmt)
            x.requires_grad_(True)
            g = torch.randn(16, 64, 56, 56, device="cuda")
            bn.weight.grad = bn.bias.grad = None
            out = compiled(x)
            out.backward(g)
            torch.cuda.synchronize()
            got[runner] += [out, x.grad, bn.weight.grad, bn.bias.grad, *bn.buffers()]
            got[runner] = [t.clone() for t in got[runner]]
            chains = [c for c in triton_native.made_chains if id(c) not in before]
            launched.append(sum(c.state.launched for c in chains))
        assert chains and all(c.entry is not None for c in chains), [c.refused for c in chains]
        if runner == "native":  # the first call loads the kernels through Triton
            assert launched[2] - launched[1] == launched[1] - launched[0] == len(chains)
        else:
            assert launched == [0, 0, 0]
    _same(got["python"], got["native"])


def test_kernels_of_symbolic_sizes_launch_natively_and_match_the_python_runner():
    """A graph compiled for symbolic sizes (softmax and layer-norm rows with a persistent
    alternative, a strided view, a column sum): the runner launches its kernels through the
    shim (grid, variant and key from the size registers) once Triton compiled each key,
    with the Python runner's bits at every size, sizes divisible by 16 or not."""
    got = {}
    for runner in ("python", "native"):
        torch._dynamo.reset()
        before = {id(s) for s in triton_native.made_symbolic}
        backend = sdk.backend("cuda_triton", runner=runner, cache=False)
        compiled = torch.compile(_block, backend=backend, dynamic=True)
        got[runner] = []
        for i, shape in enumerate(_SHAPES):
            torch.manual_seed(i)
            x = torch.randn(shape, device="cuda")
            out = compiled(x)
            torch.testing.assert_close(out, _block(x), rtol=1e-4, atol=1e-5)
            got[runner].append(out.clone())
        syms = [s for s in triton_native.made_symbolic if id(s) not in before]
        assert syms and all(s.entry is not None for s in syms), [s.refused for s in syms]
        if runner == "native":  # every launch of a key seen before went through the shim
            counts = sum(s.state.launched for s in syms)
            for i, shape in enumerate(_SHAPES[:3]):
                torch.manual_seed(i)
                x = torch.randn(shape, device="cuda")
                torch.testing.assert_close(compiled(x), _block(x), rtol=1e-4, atol=1e-5)
            torch.cuda.synchronize()
            assert sum(s.state.launched for s in syms) - counts == 3 * len(syms)
            assert any(s.keys(1) for s in syms), "no persistent alternative launched"
    _same(got["python"], got["native"])


def test_symbolic_kernels_on_views_at_odd_offsets_match_eager():
    """Triton specializes a pointer on its 16-byte alignment: inputs at aligned and odd
    offsets, alternating, of a graph of symbolic sizes never run a kernel compiled for
    another alignment (through the shim, the Python launcher or the guard's variants)."""
    torch._dynamo.reset()
    f = torch.compile(lambda x: (x * 2).sin() + 1, backend="sdk:cuda_triton", dynamic=True)
    base = torch.randn(4096 + 7, device="cuda")
    for n, offset in ((1024, 0), (2048, 0), (1024, 1), (2048, 3), (1536, 0)):
        x = base[offset : offset + n]
        torch.testing.assert_close(f(x), (x * 2).sin() + 1)
