"""A compiled graph that fails when run after it has written some of its inputs in place
names those inputs in its error (the user's state is then half updated, as eager's would be
where the same op raises), on both runners."""

from __future__ import annotations

import pytest
import torch

import sdk


def update_then_gather(state, table, idx):
    state.add_(1)
    return torch.index_select(table, 0, idx) * 2


@pytest.mark.parametrize("runner", ["native", "python"])
def test_an_index_out_of_range_after_a_write_names_the_written_input(runner):
    state, table = torch.zeros(4), torch.randn(5, 3)
    step = torch.compile(update_then_gather, backend=sdk.backend("cpu_cpp", runner=runner))
    torch.testing.assert_close(step(state, table, torch.tensor([0, 1])), table[[0, 1]] * 2)
    with pytest.raises(IndexError, match="out of bounds") as info:
        step(state, table, torch.tensor([0, 7]))
    [note] = info.value.__notes__
    assert "written graph input #0 (arg0_1 (4,) float32) in place" in note, note
    torch.testing.assert_close(state, torch.full((4,), 2.0))  # written once per call
