"""CUDA graphs (``mode="reduce-overhead"``, the cudagraphs wrapper plugin), issue 9.

Inputs at stable addresses are read in place and the others copied; outputs are handed
out over the recording's memory and raise once a later step overwrites them; training
records the forward and the backward; what cannot be recorded runs unrecorded and says why.
Every result is compared with eager on fresh inputs.
"""

from __future__ import annotations

import copy

import pytest
import torch

import sdk
from sdk.plugins import cudagraphs
from tests import models

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

RO = {"backend": "sdk:cuda_triton", "mode": "reduce-overhead"}


@pytest.fixture
def replays(monkeypatch):
    counts = {"replay": 0, "buffers": 0}
    replay, buffer_like = torch.cuda.CUDAGraph.replay, cudagraphs._buffer_like

    def counting_replay(self):
        counts["replay"] += 1
        return replay(self)

    def counting_buffer(a):
        counts["buffers"] += 1
        return buffer_like(a)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", counting_replay)
    monkeypatch.setattr(cudagraphs, "_buffer_like", counting_buffer)
    return counts


def test_inference_replays_and_reads_weights_in_place(replays):
    model = models.mlp(64, 128, 10, seed=0).cuda()
    f = torch.compile(model, **RO)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(8, 64, device="cuda")
            torch.testing.assert_close(f(x), model(x))
    assert replays["replay"] >= 3  # calls 2 to 5 replay (1 warms up)
    # only the input moves between calls: the 4 weights and biases are read in place
    assert replays["buffers"] == 1, replays


def test_an_overwritten_output_raises_and_a_kept_clone_does_not():
    model = models.mlp(64, 128, 10, seed=0).cuda()
    f = torch.compile(model, **RO)
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        f(x)
        f(x)
        y = f(x)  # a replay: y lives in the recording's memory
        kept = y.clone()
        f(x)  # the next step overwrites it
        with pytest.raises(RuntimeError, match="overwritten"):
            print(y + 1)
        torch.testing.assert_close(kept, model(x))
        # a step begun by hand: the same rule
        z = f(x)
        torch.compiler.cudagraph_mark_step_begin()
        f(x)
        with pytest.raises(RuntimeError, match="overwritten"):
            z.sum()


def test_input_mutation_matches_eager():
    def f(x, y):
        x.add_(1)
        return x * y

    g = torch.compile(f, **RO)
    for _ in range(4):
        a = torch.randn(32, device="cuda")
        b = torch.randn(32, device="cuda")
        a2 = a.clone()
        torch.testing.assert_close(g(a, b).clone(), f(a2, b))
        torch.testing.assert_close(a, a2)


def test_a_moved_static_input_is_copied_after_a_new_recording(replays):
    def f(w, x):
        return (x @ w).relu()

    g = torch.compile(f, **RO)
    w = torch.randn(16, 16, device="cuda")
    x = torch.randn(4, 16, device="cuda")
    for _ in range(3):
        torch.testing.assert_close(g(w, x), f(w, x))
    w2 = torch.randn(16, 16, device="cuda")  # the "weight" moved
    for _ in range(3):
        torch.testing.assert_close(g(w2, x), f(w2, x))
    for _ in range(3):  # and moves on every call from here
        w3 = torch.randn(16, 16, device="cuda")
        torch.testing.assert_close(g(w3, x), f(w3, x))


def _train(model, opt, xs, ys, compiled=None):
    out = []
    for x, y in zip(xs, ys):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy((compiled or model)(x), y)
        loss.backward()
        out.append([loss.detach().clone()] + [p.grad.clone() for p in model.parameters()])
        opt.step()
    return out


def test_training_records_forward_and_backward_and_matches_eager(replays):
    ref = models.mlp(64, 128, 10, seed=0).cuda()
    model = copy.deepcopy(ref)
    xs = [torch.randn(8, 64, device="cuda") for _ in range(5)]
    ys = [torch.randint(0, 10, (8,), device="cuda") for _ in range(5)]
    want = _train(ref, torch.optim.SGD(ref.parameters(), lr=0.1), xs, ys)
    got = _train(
        model, torch.optim.SGD(model.parameters(), lr=0.1), xs, ys, torch.compile(model, **RO)
    )
    for g_step, w_step in zip(got, want):
        for g, w in zip(g_step, w_step):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert replays["replay"] >= 6  # forward and backward of steps 3 to 5 at least
    # copied: the forward's x, the backward's x (saved) and its incoming gradient; the
    # activations the backward reads were written by the recorded forward: read in place
    assert replays["buffers"] <= 4, replays
    report = sdk.explain(
        lambda x: model(x).sum(), xs[0], backend="sdk:cuda_triton", wrappers=["cudagraphs"]
    )
    assert not [n for g in report.graphs for n in g.notes if "uncaptured" in n], str(report)


def test_gradient_accumulation_over_two_forwards_matches_eager():
    """Two forwards before their backwards: the second may not overwrite the activations
    the first's backward reads; it runs unrecorded and the gradients are eager's."""
    ref = models.mlp(64, 128, 10, seed=0).cuda()
    model = copy.deepcopy(ref)
    f = torch.compile(model, **RO)
    for _ in range(4):
        xa, xb = torch.randn(8, 64, device="cuda"), torch.randn(8, 64, device="cuda")
        for m, fn in ((ref, ref), (model, f)):
            m.zero_grad(set_to_none=True)
            la, lb = fn(xa).square().mean(), fn(xb).square().mean()
            lb.backward()
            la.backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_a_graph_with_a_cpu_input_runs_unrecorded_with_the_reason():
    def f(x, s):
        return x * s

    s = torch.tensor(3.0)  # a CPU scalar
    x = torch.randn(16, device="cuda")
    report = sdk.explain(f, x, s, backend="sdk:cuda_triton", wrappers=["cudagraphs"])
    g = torch.compile(f, **RO)
    for _ in range(3):
        torch.testing.assert_close(g(x, s), f(x, s))
    notes = [n for gr in report.graphs for n in gr.notes]
    assert notes == [] or any("cpu tensor" in n for n in notes), str(report)
    # the graph was not given up for good: CUDA inputs of the same shapes are recorded
    # (their key differs: the scalar's device is part of it)


def test_gpt2_training_is_recorded_and_matches_eager(replays):
    """The issue's case: a GPT-2 training step under reduce-overhead records its forward and
    backward graphs, and every step's results pass Dynamo's rule against fp64."""
    pytest.importorskip("transformers")
    from tests.gpu.common import rmse_ok, train_results

    model = models.gpt2(seed=0, n_embd=128, vocab_size=1024).cuda()
    ref = copy.deepcopy(model).double()
    ids = torch.randint(0, 1024, (2, 64), device="cuda")

    def step(m):
        return m(input_ids=ids, labels=ids).loss

    eager, want = train_results(model, step), train_results(ref, step)
    compiled = torch.compile(model, **RO)
    # step 1 runs as it is; its backward gets the attention's CPU seed tensors, later
    # ones the recorded forward's CUDA tensors: recorded from step 3, replayed from step 4
    for _ in range(5):
        got = train_results(compiled, step)
        names = ["loss"] + [n for n, _ in model.named_parameters()]
        bad = [
            f"{n}: {why}"
            for n, a, e, r in zip(names, got, eager, want)
            for ok, why in [rmse_ok(a, e, r)]
            if not ok
        ]
        assert not bad, "\n".join(bad)
    report = sdk.explain(step, model, backend="sdk:cuda_triton", wrappers=["cudagraphs"])
    notes = [n for g in report.graphs for n in g.notes if "runs uncaptured" in n]
    assert not notes, "\n".join(notes)
    assert replays["replay"] >= 6  # steps 4 and 5 replay forward and backward at least


def test_an_output_that_is_an_input_is_the_callers_input():
    def f(w, x):
        return x @ w, w, w.t()

    g = torch.compile(f, **RO)
    for _ in range(4):
        w = torch.randn(8, 8, device="cuda")  # moves every call: copied into the recording
        x = torch.randn(2, 8, device="cuda")
        y, w_out, wt = g(w, x)
        torch.testing.assert_close(y, x @ w)
        assert w_out.data_ptr() == w.data_ptr() and wt.data_ptr() == w.data_ptr()
        torch.testing.assert_close(wt, w.t())


def test_gradients_accumulated_over_steps_match_eager():
    """.grad set to None only every other step: the recorded backward's gradients kept in
    .grad may not be overwritten by the next step's replay (the backward runs unrecorded
    while they are held, and says why)."""
    _mlp_steps_match_eager(steps=6, zero_every=2)


def _mlp_steps_match_eager(steps: int, zero_every: int) -> torch.nn.Module:
    """``steps`` MLP training steps under reduce-overhead beside eager, ``.grad`` set to None
    every ``zero_every`` steps; each step's gradients as eager's. Returns the compiled model."""
    ref = models.mlp(64, 128, 10, seed=0).cuda()
    model = copy.deepcopy(ref)
    f = torch.compile(model, **RO)
    for step in range(steps):
        x = torch.randn(8, 64, device="cuda")
        for m, fn in ((ref, ref), (model, f)):
            if step % zero_every == 0:
                m.zero_grad(set_to_none=True)
            fn(x).square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    return model


def test_a_view_of_an_output_kept_over_steps_keeps_its_values():
    model = models.mlp(64, 128, 10, seed=0).cuda()
    f = torch.compile(model, **RO)
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            f(x)
        view = f(x)[:, :5]  # the output itself is dropped, its view kept
        want = view.clone()
        y = f(2 * x)  # a new step: the recording may not overwrite what the view reads
        torch.testing.assert_close(view, want)
        torch.testing.assert_close(y, model(2 * x))
        del view
        f(x)  # replays again once the view is gone


def test_gradients_are_taken_as_grad_not_copied():
    """AccumulateGrad keeps a recorded backward's gradient as .grad (a detached alias over
    the recording's memory), not a copy, which would add a kernel a parameter a step."""
    model = _mlp_steps_match_eager(steps=4, zero_every=1)
    managed = cudagraphs._device(torch.cuda.current_device()).managed
    taken = [p.grad.untyped_storage().data_ptr() in managed for p in model.parameters()]
    assert all(taken), taken
