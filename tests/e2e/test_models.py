"""Real models through the SDK against eager: forward, loss and gradients.

HF transformers' GPT-2 (two layers, random weights from a config, no
download): at least 90 % of its ATen calls must run in generated kernels or need no code
(views, size arithmetic), none through the ATen fallback.
"""

from __future__ import annotations

import pytest
import torch

import sdk
from tests import models
from tests.plugins_under_test import PLUGINS, device_of, skip_model_under_interpreter

transformers = pytest.importorskip("transformers")


@pytest.mark.slow
@pytest.mark.parametrize("plugin", PLUGINS)
def test_gpt2_forward_backward_matches_eager(plugin, graph_reports):
    skip_model_under_interpreter(plugin, 40)
    dev = device_of(plugin)
    model = models.gpt2(seed=0, bos_token_id=0, eos_token_id=0).to(dev)
    ids = torch.randint(0, 512, (2, 32), device=dev)

    def step(ids):
        return model(ids, labels=ids).loss

    compiled = torch.compile(step, backend=sdk.backend(plugin))
    loss = compiled(ids)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    ref = step(ids)
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    torch.testing.assert_close(loss, ref, rtol=1e-4, atol=1e-4)
    for (name, _), g, r in zip(model.named_parameters(), grads, ref_grads):
        torch.testing.assert_close(
            g, r, rtol=1e-3, atol=2e-4, msg=lambda m, name=name: f"{name}: {m}"
        )

    # the reports of the compile above (what sdk.explain would print, without compiling the
    # model a second time: under Triton's interpreter that is half a minute)
    report = "\n".join(map(str, graph_reports))
    assert {"forward", "backward"} <= {g.kind for g in graph_reports}, report
    calls = [g.calls for g in graph_reports]
    total = sum(g.aten_ops for g in graph_reports)
    covered = sum(c.kernels + c.views + c.folded for c in calls)  # the rest: library calls
    assert not any(c.fallbacks for c in calls), report
    assert covered / total >= 0.9, (
        f"{covered / total:.1%} in generated kernels or no code\n{report}"
    )
