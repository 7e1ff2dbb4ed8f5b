"""sdk.runtime: what a wrapper plugin (CUDA graphs) needs to hand out outputs over memory it
keeps, and to know when a new step begins."""

from __future__ import annotations

import gc

import pytest
import torch

import sdk
from sdk import runtime

CAN_REVOKE = hasattr(torch._C, "_set_storage_access_error_msg")  # CUDA builds of torch
MSG = "overwritten: clone it"


def test_hand_out_shares_memory_not_storage_objects():
    base = torch.arange(12.0)
    a, b = base.view(3, 4), base[4:8]
    c = torch.ones(5)[1:]
    out = runtime.Outputs([a, b, 3, None, c], MSG).hand_out()
    assert out[2:4] == (3, None)
    for o, t in zip(out[:2] + out[4:], (a, b, c)):
        assert o.data_ptr() == t.data_ptr()
        assert (o.shape, o.stride(), o.storage_offset()) == (
            t.shape,
            t.stride(),
            t.storage_offset(),
        )
        assert o.untyped_storage()._cdata != t.untyped_storage()._cdata
    # two outputs over one storage still share one (new) storage
    assert out[0].untyped_storage()._cdata == out[1].untyped_storage()._cdata
    base.add_(1)
    torch.testing.assert_close(out[1], b)


def test_hand_out_revokes_none_of_what_it_hands_out(monkeypatch):
    revoked = []
    monkeypatch.setattr(runtime._tp(), "set_access_error", lambda t, m: revoked.append(t) or True)
    base = torch.arange(8.0)
    outputs = runtime.Outputs([base[:4], base[4:], torch.ones(3)], MSG)  # 2 share a storage
    for _ in range(3):
        out = outputs.hand_out()
        assert not revoked
        del out
    kept = outputs.hand_out()
    assert outputs.revoke() == 3 and len(revoked) == 3  # each held one, once
    del kept


def test_an_unheld_output_is_handed_out_again_and_a_held_one_is_not():
    keep = [torch.ones(4), torch.zeros(3)]
    outputs = runtime.Outputs(keep, MSG)
    first = outputs.hand_out()
    ids = [id(t) for t in first]
    assert outputs.in_use()
    held = first[1]
    del first
    assert outputs.in_use()  # one is still held
    second = outputs.hand_out()
    assert id(second[0]) == ids[0] and id(second[1]) != ids[1]
    del second, held
    assert not outputs.in_use()


@pytest.mark.parametrize("hold", ["view", "sharer", "saved", "changed"])
def test_what_counts_as_held_or_changed(hold):
    keep = torch.ones(4)
    outputs = runtime.Outputs([keep], MSG)
    (t,) = outputs.hand_out()
    first = id(t)
    if hold == "view":
        other = t[1:]
    elif hold == "sharer":  # no view record: only the storage is shared
        other = torch.empty(0).set_(t.untyped_storage(), 1, (3,), (1,))
    elif hold == "saved":  # autograd keeps the tensor, not a Python reference
        w = torch.ones(4, requires_grad=True)
        other = (w * t).sum()
    else:
        t.unsqueeze_(0)  # changed in place, then dropped
    del t
    gc.collect()
    if hold == "changed":
        assert not outputs.in_use()
        (t,) = outputs.hand_out()
        assert t.shape == (4,) and t.stride() == (1,)  # not the changed one
        return
    assert outputs.in_use()
    del other
    gc.collect()
    assert not outputs.in_use()
    (t,) = outputs.hand_out()
    assert id(t) == first


def test_without_reuse_every_hand_out_is_new_and_held_by_its_storage():
    keep = torch.ones(4)
    outputs = runtime.Outputs([keep], MSG, reuse=False)
    (t,) = outputs.hand_out()
    sharer = torch.empty(0).set_(t.untyped_storage(), 1, (3,), (1,))
    del t
    gc.collect()
    assert outputs.in_use()
    torch.testing.assert_close(sharer, keep[1:])
    (u,) = outputs.hand_out()
    assert u.untyped_storage()._cdata != sharer.untyped_storage()._cdata
    del sharer, u
    gc.collect()
    assert not outputs.in_use()


@pytest.mark.parametrize("reuse", [True, False])
def test_revoke_reaches_handed_out_tensors_and_reports_views_out_of_reach(reuse):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    keep = torch.ones(4, device=dev)
    outputs = runtime.Outputs([keep], MSG, reuse=reuse)
    (t,) = outputs.hand_out()
    view = t[1:]
    assert outputs.unreachable()  # the view holds the memory; revoking cannot reach it
    n = outputs.revoke()
    assert n == (1 if CAN_REVOKE else 0)
    if CAN_REVOKE:
        with pytest.raises(RuntimeError, match=MSG):
            print(t + 1)
    assert outputs.unreachable() and outputs.in_use()
    del view, t  # (t holds the memory too where torch cannot revoke it)
    gc.collect()
    assert not outputs.unreachable() and not outputs.in_use()
    (fresh,) = outputs.hand_out()  # a new hand-out reads fine
    torch.testing.assert_close(fresh, keep)


@pytest.mark.parametrize("reuse", [True, False])
def test_release_is_revoke_then_unreachable(reuse):
    outputs = runtime.Outputs([torch.ones(4), torch.zeros(2)], MSG, reuse=reuse)
    first, second = outputs.hand_out()
    view = second[1:]
    del second
    gc.collect()
    assert outputs.release()  # the view holds memory that revoking cannot reach
    assert outputs.unreachable() and outputs.in_use()
    if CAN_REVOKE:
        with pytest.raises(RuntimeError, match=MSG):
            print(first + 1)
    del view, first
    gc.collect()
    assert not outputs.release() and not outputs.in_use()
    a, b = outputs.hand_out()
    torch.testing.assert_close(a, torch.ones(4))
    torch.testing.assert_close(b, torch.zeros(2))


def test_a_scan_is_what_release_acts_on_and_hand_out_after_it_need_not_count():
    outputs = runtime.Outputs([torch.ones(4), torch.zeros(2), torch.full((3,), 2.0)], MSG)
    first = outputs.hand_out()
    held, view = first[1], first[2][1:]
    ids = [id(t) for t in first]
    del first
    gc.collect()
    scan = outputs.scan()
    assert [j for j, _ in scan.held] == [1, 2] and scan.unreachable  # the view: out of reach
    assert [shared for _, shared in scan.held] == [False, True]
    assert outputs.release(scan)  # revokes both; the view's memory stays unreachable
    again = outputs.hand_out(unheld=True)
    assert id(again[0]) == ids[0]  # nobody held it: the same tensor
    assert id(again[1]) != ids[1] and id(again[2]) != ids[2]
    torch.testing.assert_close(list(again), [torch.ones(4), torch.zeros(2), torch.full((3,), 2.0)])
    del held, view, again
    gc.collect()
    assert not outputs.in_use()


def test_data_ptrs_equal_reads_the_positions_asked():
    x, y, z = torch.ones(3), torch.ones(3), torch.ones(3)
    ptrs = [x.data_ptr(), 0, z.data_ptr()]
    assert runtime.data_ptrs_equal([x, 7, z], ptrs, [0, 2])
    assert not runtime.data_ptrs_equal([x, 7, y], ptrs, [0, 2])
    assert runtime.data_ptrs_equal([y], [0], [])


def test_a_tensor_autograd_makes_over_the_storage_is_out_of_reach():
    keep = torch.ones(4)
    outputs = runtime.Outputs([keep], MSG, reuse=False)
    (g,) = outputs.hand_out()
    kept_grad = g.detach()  # what AccumulateGrad keeps as .grad
    del g
    gc.collect()
    assert outputs.unreachable()
    outputs.revoke()
    assert outputs.unreachable()
    del kept_grad
    gc.collect()
    assert not outputs.unreachable()


def test_step_token_moves_per_compiled_call_and_mark_step_not_per_backward():
    m = torch.nn.Linear(4, 4)
    f = torch.compile(m, backend=sdk.backend("cpu_cpp"))
    t0 = runtime.step_token()
    y = f(torch.randn(2, 4))
    t1 = runtime.step_token()
    y.sum().backward()
    t2 = runtime.step_token()
    torch.compiler.cudagraph_mark_step_begin()
    t3 = runtime.step_token()
    assert t0 != t1 and t1 == t2 and t2 != t3
    assert not runtime.mark_step_called(t0, t1) and runtime.mark_step_called(t2, t3)
