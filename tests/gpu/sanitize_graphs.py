"""Small graphs of every kernel shape, for ``compute-sanitizer --tool memcheck``.

Each graph is compiled through ``sdk:<plugin>`` (default cuda_triton) and checked
against eager; run it under the sanitizer with the caching allocator off, so that
every tensor is its own allocation and a read past its end is an error the tool
sees (inside a cached block it would not be):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \\
        python tests/gpu/sanitize_graphs.py

Shapes: 1D and 2D-tiled pointwise, persistent, looped and split reductions,
multi-stage (softmax, layer norm) forward and backward, indirect loads
(embedding, gather, index), scatter (embedding backward), cat and pad (with
empty parts), random numbers (dropout), odd sizes that leave partial blocks,
column reductions, split reductions (BatchNorm's statistics and gradients as chains of
split kernels, rows and columns), pointwise scatters, index_put as index_add, a mixture of experts' routing, max-pooling and a
channels-last convolution.

``--dynamic``: graphs compiled once with ``dynamic=True`` (symbolic sizes: sizes are
kernel arguments, grids computed per call) run at several odd sizes, forward and backward,
checked against eager; with the caching allocator off, as above.

``--cudagraphs``: MLP training steps and gradient accumulation under
``mode="reduce-overhead"`` (recorded forward and backward replaying over one memory
pool), and conv + batch norm training steps (kernels writing the running statistics into
the module's buffers), checked against eager; run it with the caching allocator on (CUDA graphs record
into its private pools).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

DEV = "cuda"


def _moe(x, router, k=2):
    top_w, top_i = torch.topk(torch.softmax(x @ router, -1), k, dim=-1)
    experts, perm = torch.sort(top_i.reshape(-1))
    rows = x[perm // k] * (experts + 1).unsqueeze(-1) * top_w.reshape(-1)[perm].unsqueeze(-1)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    return rows[inv].view(x.shape[0], k, -1).sum(1)


def graphs():
    r = torch.randn
    yield "pointwise", lambda x, y: (x * y + 1).relu().sin(), (r(1000, 37), r(1000, 37))
    yield "pointwise_2d_transpose", lambda x: (x.t() * 2).contiguous(), (r(257, 129),)
    yield "persistent_reduction", lambda x: x.sum(-1), (r(300, 77),)
    yield "looped_reduction", lambda x: x.amax(-1), (r(33, 20001),)
    yield "split_reduction", lambda x: x.sum(), (r(1 << 20 | 3),)
    yield "softmax_fwbw", lambda x: F.softmax(x, -1), (r(65, 1031, requires_grad=True),)
    yield (
        "layer_norm_fwbw",
        lambda x, w, b: F.layer_norm(x, (513,), w, b),
        (r(67, 513, requires_grad=True), r(513, requires_grad=True), r(513, requires_grad=True)),
    )
    yield (
        "embedding_fwbw",
        lambda i, w: F.embedding(i, w) * 2,
        (torch.randint(0, 1000, (7, 33)), r(1000, 65, requires_grad=True)),
    )
    yield "gather", lambda x, i: torch.gather(x, 1, i), (r(40, 50), torch.randint(0, 50, (40, 23)))
    yield "index", lambda x, i: x[i] + 1, (r(100, 17), torch.randint(-100, 100, (31,)))
    yield (
        "cat_pad_empty",
        lambda a, b: (
            torch.cat([a[:, :0], b, a], 1),
            F.pad(b[:0], (1, 2, 3, 0), value=1.0),
            torch.block_diag(a, b, a[:0]),
        ),
        (r(3, 5), r(3, 7)),
    )
    yield "dropout", lambda x: F.dropout(x, 0.5, training=True).sum(), (r(4099),)
    yield (
        "bf16_mixed",
        lambda x, w: (x @ w).float().softmax(-1),
        (r(64, 96, dtype=torch.bfloat16), r(96, 130, dtype=torch.bfloat16)),
    )
    yield (
        "column_reduction",
        lambda x: (F.gelu(x * 3).sum(0), *torch.var_mean(x, 0)),
        (r(1000, 333),),
    )
    yield (
        "scatters",
        lambda x, i, s: (
            torch.slice_scatter(x * 2, s, 1, 2, 9, 3),
            torch.scatter(x, 1, i, -1.0),
            torch.select_scatter(x, s[:, 0], 1, -1),
        ),
        (r(37, 11), torch.randint(0, 11, (37, 1)), r(37, 3)),
    )
    yield (
        "index_put_accumulate",
        lambda x, i, v: torch.index_put(x * 1, [i], v, True),
        (r(50, 7), torch.randint(-50, 50, (129,)), r(129, 7)),
    )
    # a mixture of experts' routing: top-2 scattered back (topk's backward), rows sorted by
    # expert and gathered through the sort's indices, their quotient by k and their inverse
    # (the backward's accumulations through them as writes: core/passes/permutations.py)
    yield ("moe_routing_fwbw", _moe, (r(75, 9, requires_grad=True), r(9, 4, requires_grad=True)))
    yield (
        "max_pool_bn_relu",
        lambda x, m, v: F.max_pool2d(
            F.batch_norm(x, m, v, training=False).relu(), 3, 2, 1, ceil_mode=True
        ),
        (r(3, 5, 17, 15), r(5), r(5).abs() + 0.5),
    )
    # the gradient gathered from overlapping windows; ceil_mode's last window hangs over
    yield (
        "max_pool_fwbw_channels_last",
        lambda x: F.max_pool2d(
            x.contiguous(memory_format=torch.channels_last) * 2, 3, 2, 1, ceil_mode=True
        ),
        (r(3, 5, 17, 15, requires_grad=True),),
    )
    yield (
        "cross_entropy_fwbw",
        lambda x, t: F.cross_entropy(x.float() * 2, t),
        (r(33, 20001, dtype=torch.bfloat16, requires_grad=True), torch.randint(0, 20001, (33,))),
    )
    yield (
        "scatter_into_zeros",
        lambda x, i: torch.scatter(torch.zeros_like(x), 1, i, 3.0).sum(1),
        (r(37, 4099), torch.randint(0, 4099, (37, 1))),
    )
    yield (
        "conv_channels_last",
        lambda x, w, b: F.adaptive_avg_pool2d(F.conv2d(x, w, b, padding=1).relu(), 1),
        (r(2, 3, 19, 13), r(8, 3, 3, 3), r(8)),
    )
    # split reductions: rows too few for the GPU (BatchNorm's statistics and gradients
    # over 40 channels of 4x61x67, NCHW rows and channels-last columns), few long columns;
    # odd sizes leave partial chunks and blocks
    bn = (r(4, 40, 61, 67, requires_grad=True), r(40, requires_grad=True), r(40))
    yield (
        "batch_norm_train_nchw",
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True).relu(),
        bn,
    )
    yield (
        "batch_norm_train_channels_last",
        lambda x, w, b: F.batch_norm(
            x.contiguous(memory_format=torch.channels_last), None, None, w, b, training=True
        ),
        bn,
    )
    yield "few_long_columns", lambda x: (x.sum(0), x.var(0)), (r(40001, 5),)
    # one long column sum on few programs (a bias gradient: 384 columns of 3 x 2731 rows)
    yield "long_column_sum", lambda x: x.float().sum((0, 1)), (r(3, 2731, 384),)
    # short columns of several stages, split from 512 rows: BatchNorm1d over 700 rows of 24,
    # channels-last BatchNorm over 2x19x17 = 646 rows of 24 channels
    yield (
        "batch_norm1d_train_short_columns",
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True).relu(),
        (r(700, 24, requires_grad=True), r(24, requires_grad=True), r(24)),
    )
    yield (
        "batch_norm_train_channels_last_short",
        lambda x, w, b: F.batch_norm(
            x.contiguous(memory_format=torch.channels_last), None, None, w, b, training=True
        ),
        (r(2, 24, 19, 17, requires_grad=True), r(24, requires_grad=True), r(24)),
    )


def _mismatches(name: str, got: list, want: list, tol: float) -> int:
    """How many of ``got`` differ from ``want`` (each printed)."""
    bad = 0
    for o, e in zip(got, want):
        try:
            torch.testing.assert_close(o.detach(), e.detach(), rtol=tol, atol=tol)
        except AssertionError as exc:
            bad += 1
            print(f"{name}: MISMATCH {exc}")
    return bad


def main(plugin: str = "cuda_triton") -> int:
    bad = 0
    for name, fn, args in graphs():
        args = [a.to(DEV).detach().requires_grad_(a.requires_grad) for a in args]
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=f"sdk:{plugin}")
        # twice: the first call loads the kernels (split reductions' chains launch through
        # Python then); the second launches every kernel it loaded from the runner
        for _ in range(2):
            out = compiled(*args)
            outs = out if isinstance(out, tuple) else (out,)
            if any(a.requires_grad for a in args):
                sum(o.float().sum() for o in outs).backward()
            torch.cuda.synchronize()
        if name != "dropout":
            ref = fn(*[a.detach() for a in args])
            refs = ref if isinstance(ref, tuple) else (ref,)
            bad += _mismatches(name, outs, refs, 2e-2)
        print(f"{name}: ran")
    print(f"sanitize_graphs: {bad} mismatches")
    return 1 if bad else 0


def dynamic_graphs():
    r = torch.randn
    yield "dyn_pointwise", lambda x, y: (x * y + 1).relu().sin(), lambda n: (r(n, 37), r(n, 37))
    yield (
        "dyn_rows_softmax_fwbw",
        lambda x: F.softmax(x * 2, -1),
        lambda n: (r(n, 1031, requires_grad=True),),
    )
    yield "dyn_cols_softmax", lambda x: F.softmax(x, -1), lambda n: (r(5, n),)
    yield (
        "dyn_layer_norm_fwbw",
        lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
        lambda n: (
            r(n, 96, requires_grad=True),
            r(96, requires_grad=True),
            r(96, requires_grad=True),
        ),
    )
    yield "dyn_column_sum", lambda x: (F.gelu(x * 3).sum(0), x.mean(0)), lambda n: (r(n, 333),)
    yield "dyn_transpose", lambda x: (x.t() * 2).contiguous(), lambda n: (r(n, 129),)
    yield "dyn_view", lambda x, y: (x.view(-1, 4) * y).sum(1), lambda n: (r(n, 8), r(4))
    yield (
        "dyn_max_pool_fwbw",
        lambda x: F.max_pool2d(x.relu(), 3, 2, 1).sum(),
        lambda n: (r(2, 3, n % 61 + 5, n % 23 + 5, requires_grad=True),),
    )


def dynamic_main() -> int:
    bad = 0
    for name, fn, make in dynamic_graphs():
        torch._dynamo.reset()
        f = torch.compile(fn, backend="sdk:cuda_triton", dynamic=True)
        for n in (3, 17, 1000, 4099):
            args = [a.to(DEV).detach().requires_grad_(a.requires_grad) for a in make(n)]
            out = f(*args)
            outs = out if isinstance(out, tuple) else (out,)
            grads = []
            if any(a.requires_grad for a in args):
                sum(o.float().sum() for o in outs).backward()
                grads = [a.grad for a in args if a.requires_grad]
            ref_args = [a.detach().requires_grad_(a.requires_grad) for a in args]
            ref = fn(*ref_args)
            refs = ref if isinstance(ref, tuple) else (ref,)
            ref_grads = []
            if grads:
                sum(o.float().sum() for o in refs).backward()
                ref_grads = [a.grad for a in ref_args if a.requires_grad]
            torch.cuda.synchronize()
            bad += _mismatches(f"{name} n={n}", [*outs, *grads], [*refs, *ref_grads], 2e-3)
        print(f"{name}: ran")
    print(f"sanitize_graphs: dynamic {bad} mismatches")
    return 1 if bad else 0


def cudagraphs_main() -> int:
    import copy

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(33, 65), torch.nn.GELU(), torch.nn.Linear(65, 7)).to(
        DEV
    )
    model = copy.deepcopy(ref)
    f = torch.compile(model, backend="sdk:cuda_triton", mode="reduce-overhead")
    bad = 0
    for step in range(6):
        xs = [torch.randn(5, 33, device=DEV) for _ in range(1 + step % 2)]  # odd: accumulate
        for m, fn in ((ref, ref), (model, f)):
            m.zero_grad(set_to_none=True)
            losses = [fn(x).square().mean() for x in xs]
            for loss in reversed(losses):
                loss.backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            try:
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            except AssertionError as exc:
                bad += 1
                print(f"cudagraphs step {step}: MISMATCH {exc}")
        with torch.no_grad():
            for p, q in zip(model.parameters(), ref.parameters()):
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
    # batch norm in training: its kernels write the running statistics into the module's
    # buffers, once per step, also when the step is recorded and replayed
    ref = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()
    ).to(DEV)
    model = copy.deepcopy(ref)
    f = torch.compile(model, backend="sdk:cuda_triton", mode="reduce-overhead")
    for step in range(5):
        x = torch.randn(4, 3, 9, 9, device=DEV)
        for m, fn in ((ref, ref), (model, f)):
            m.zero_grad(set_to_none=True)
            fn(x).square().mean().backward()
        pairs = list(zip(model.buffers(), ref.buffers()))
        pairs += [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters())]
        for a, b in pairs:
            try:
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
            except AssertionError as exc:
                bad += 1
                print(f"cudagraphs batch norm step {step}: MISMATCH {exc}")
    torch.cuda.synchronize()
    print(f"sanitize_graphs: cudagraphs {bad} mismatches")
    return 1 if bad else 0


def _report_workers() -> None:
    """Say how many kernels the compile workers (``sdk.workers``, on by default) compiled
    in this run, so that a log shows whether the sanitizer watched them work."""
    from sdk.plugins.cuda_triton import offline

    print(f"sanitize_graphs: compile workers compiled {offline.WORKER_COMPILES}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--cudagraphs"]:
        code = cudagraphs_main()
    elif sys.argv[1:] == ["--dynamic"]:
        code = dynamic_main()
    else:
        code = main(*sys.argv[1:])
    _report_workers()
    sys.exit(code)
