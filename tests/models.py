"""Small models the tests build: one parameterised builder per family.

Each builder returns a fresh module on the CPU in its default mode; the caller moves it
(``.to(dev, dtype)``), sets ``.train()``/``.eval()`` and makes its inputs. ``seed``, when
given, seeds torch's generator right before the first parameter is made, so a call with
``seed=0`` builds the same weights as ``torch.manual_seed(0)`` followed by the call.

Importing this module needs only torch: ``gpt2`` imports transformers when called (callers
``pytest.importorskip("transformers")`` first).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from torch import nn

T = TypeVar("T")

# The tiny GPT-2 most tests use; each call site overrides what differs.
GPT2_BASE: dict[str, Any] = {
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 4,
    "vocab_size": 512,
    "n_positions": 64,
}


def _seed(seed: int | None) -> None:
    if seed is not None:
        torch.manual_seed(seed)


def _per_layer(value: T | Sequence[T], n: int, name: str) -> list[T]:
    """``value`` for each of ``n`` layers: one value for all, or one per layer."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}: {len(value)} values for {n} layers; give one or {n}")
        return list(value)
    return [value] * n  # type: ignore[list-item]


def mlp(
    *widths: int,
    act: type[nn.Module] = nn.GELU,
    layernorm: bool = False,
    act_last: bool = False,
    seed: int | None = None,
) -> nn.Sequential:
    """``Linear(widths[0], widths[1])``, ``act()`` (then ``LayerNorm`` with ``layernorm``),
    ... ``Linear(widths[-2], widths[-1])`` (then ``act()`` with ``act_last``)."""
    if len(widths) < 2:
        raise ValueError(f"mlp needs at least two widths (in and out), got {widths}")
    _seed(seed)
    layers: list[nn.Module] = []
    for i, (w_in, w_out) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(w_in, w_out))
        if i < len(widths) - 2:
            layers.append(act())
            if layernorm:
                layers.append(nn.LayerNorm(w_out))
    if act_last:
        layers.append(act())
    return nn.Sequential(*layers)


def convnet(
    *channels: int,
    padding: int | Sequence[int] = 1,
    batchnorm: bool | Sequence[bool] = True,
    act: type[nn.Module] | Sequence[type[nn.Module]] = nn.ReLU,
    maxpool_after: Sequence[int] = (),
    classes: int = 10,
    seed: int | None = None,
) -> nn.Sequential:
    """A 3x3 convolution per step of ``channels`` (with ``padding``), each followed by
    ``BatchNorm2d`` (where ``batchnorm``), ``act()`` and, for the indices in
    ``maxpool_after``, ``MaxPool2d(2)``; then a global average pool and
    ``Linear(channels[-1], classes)``. ``padding``, ``batchnorm`` and ``act`` take one value
    or one per convolution."""
    if len(channels) < 2:
        raise ValueError(f"convnet needs at least two channel counts, got {channels}")
    n = len(channels) - 1
    pads = _per_layer(padding, n, "padding")
    norms = _per_layer(batchnorm, n, "batchnorm")
    acts = _per_layer(act, n, "act")
    _seed(seed)
    layers: list[nn.Module] = []
    for i, (c_in, c_out) in enumerate(itertools.pairwise(channels)):
        layers.append(nn.Conv2d(c_in, c_out, 3, padding=pads[i]))
        if norms[i]:
            layers.append(nn.BatchNorm2d(c_out))
        layers.append(acts[i]())
        if i in maxpool_after:
            layers.append(nn.MaxPool2d(2))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels[-1], classes)]
    return nn.Sequential(*layers)


def gpt2_config(*, dropout: float = 0.0, **overrides: Any) -> Any:
    """``transformers.GPT2Config`` of ``GPT2_BASE`` with ``dropout`` as its attention,
    embedding and residual dropout, then ``overrides`` (any ``GPT2Config`` field)."""
    from transformers import GPT2Config

    fields = {
        **GPT2_BASE,
        "attn_pdrop": dropout,
        "embd_pdrop": dropout,
        "resid_pdrop": dropout,
        **overrides,
    }
    return GPT2Config(**fields)


def gpt2(*, seed: int | None = None, dropout: float = 0.0, **overrides: Any) -> nn.Module:
    """``transformers.GPT2LMHeadModel`` (random weights, no download) of
    ``gpt2_config(dropout=dropout, **overrides)``."""
    from transformers import GPT2LMHeadModel

    cfg = gpt2_config(dropout=dropout, **overrides)
    _seed(seed)
    return GPT2LMHeadModel(cfg)
