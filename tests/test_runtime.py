"""sdk.runtime: what a wrapper plugin (CUDA graphs) needs to hand out outputs over memory it
keeps, and to know when a new step begins."""

from __future__ import annotations

import gc

import pytest
import torch

import sdk
from sdk import runtime


def test_handout_shares_memory_not_storage_objects():
    base = torch.arange(12.0)
    a, b = base.view(3, 4), base[4:8]
    out, refs, handed = runtime.handout([a, b, 3, None])
    assert out[2:] == (3, None)
    for o, t in zip(out[:2], (a, b)):
        assert o.data_ptr() == t.data_ptr()
        assert (o.shape, o.stride(), o.storage_offset()) == (t.shape, t.stride(), t.storage_offset())
        assert o.untyped_storage()._cdata != t.untyped_storage()._cdata
    # two outputs over one storage still share one (new) storage
    assert out[0].untyped_storage()._cdata == out[1].untyped_storage()._cdata
    base.add_(1)
    torch.testing.assert_close(out[1], b)
    assert len(refs) == 2 and len(handed) == 2


def test_storage_ref_lives_while_any_tensor_uses_the_storage():
    keep = torch.ones(4)  # the memory the handed-out tensor is over
    out, refs, handed = runtime.handout([keep])
    sharer = torch.empty(0).set_(out[0].untyped_storage(), 1, (3,), (1,))  # no view record
    del out
    gc.collect()
    assert handed[0]() is None and all(r.alive for r in refs)
    torch.testing.assert_close(sharer, keep[1:])
    del sharer
    gc.collect()
    assert not any(r.alive for r in refs)


def test_revoke_makes_access_raise_where_torch_can():
    keep = torch.ones(4)
    out, _refs, handed = runtime.handout([keep])
    n = runtime.revoke(handed, "overwritten: clone it")
    if not hasattr(torch._C, "_set_storage_access_error_msg"):  # CPU builds of torch
        assert n == 0
        return
    assert n == 1
    with pytest.raises(RuntimeError, match="overwritten: clone it"):
        out[0].sum()
    torch.testing.assert_close(keep.sum(), torch.tensor(4.0))  # the owner's storage is not


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
