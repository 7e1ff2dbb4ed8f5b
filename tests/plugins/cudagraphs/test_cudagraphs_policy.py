"""The cudagraphs plugin's step policy, without a GPU (tests/gpu/test_cudagraphs.py runs the
real thing): when a step begins, which replays may overwrite outputs still in use, and that
outputs of an earlier step are revoked only when a replay is about to overwrite them."""

from __future__ import annotations

import gc

import pytest
import torch

import sdk
from sdk import runtime
from sdk.plugins import cudagraphs as cg


def _recording(dev: cg._Device) -> cg._Recording:
    return cg._Recording(
        0, next(dev.order), None, {}, {}, [], runtime.Outputs((torch.ones(4),), cg.STALE), []
    )


def _hand_out(dev: cg._Device, rec: cg._Recording):
    out = rec.out.hand_out()
    dev.step[id(rec)] = rec
    return out[0]


def safe(dev: cg._Device, rec: cg._Recording) -> bool:
    return dev.blocking(rec) is None


def _one_step(compiled_call):
    """A device with one recording, whose output was handed out in a step that began."""
    dev = cg._Device()
    rec = _recording(dev)
    compiled_call()
    dev.begin()
    return dev, rec, _hand_out(dev, rec)


@pytest.fixture
def compiled_call():
    f = torch.compile(lambda x: x + 1, backend=sdk.backend("cpu_cpp"))
    return lambda: f(torch.ones(2))  # each call moves the step token


def test_a_live_output_blocks_its_own_graph_and_earlier_recorded_ones(compiled_call):
    dev = cg._Device()
    a, b = _recording(dev), _recording(dev)  # a recorded first
    compiled_call()
    dev.begin()
    out_b = _hand_out(dev, b)
    assert not safe(dev, b)  # b's own output is in use
    assert not safe(dev, a)  # b's output may sit in a's scratch memory
    del out_b
    gc.collect()
    assert safe(dev, a) and safe(dev, b)
    out_a = _hand_out(dev, a)
    assert safe(dev, b)  # a's outputs were kept out of b's memory when b recorded
    assert not safe(dev, a)
    del out_a


def test_a_new_compiled_call_begins_a_step_unless_a_backward_is_pending(compiled_call):
    dev, rec, out = _one_step(compiled_call)
    dev.pending = 1  # a forward ran
    compiled_call()
    dev.begin()
    assert not safe(dev, rec) and not dev.stale  # same step: out still counts
    torch.compiler.cudagraph_mark_step_begin()  # the user begins one anyway
    dev.begin()
    assert safe(dev, rec) and len(dev.stale) == 1
    assert not dev.pending
    assert out.data_ptr() == rec.outputs[0].data_ptr()


def test_stale_outputs_are_revoked_at_the_next_replay_only(compiled_call):
    dev, _rec, out = _one_step(compiled_call)
    compiled_call()
    dev.begin()
    torch.testing.assert_close(out, torch.ones(4))  # not overwritten yet: still readable
    dev.revoke_stale()  # what a replay does first
    assert not dev.stale
    if hasattr(torch._C, "_set_storage_access_error_msg"):
        with pytest.raises(RuntimeError, match="overwritten"):
            out.sum()


def test_an_earlier_steps_output_held_out_of_reach_blocks_the_replays_that_overwrite_it(
    compiled_call,
):
    dev = cg._Device()
    a, b = _recording(dev), _recording(dev)
    compiled_call()
    dev.begin()
    view = _hand_out(dev, b)[1:]  # the output dropped, a view of it kept
    compiled_call()
    dev.begin()  # a new step: b's outputs are stale
    assert dev.blocking(b) == cg.HELD and dev.blocking(a) == cg.HELD
    dev.revoke_stale()  # the view is out of reach: b stays stale
    assert dev.stale and dev.blocking(b) == cg.HELD
    del view
    gc.collect()
    assert dev.blocking(a) is None and dev.blocking(b) is None
    dev.revoke_stale()
    assert not dev.stale
