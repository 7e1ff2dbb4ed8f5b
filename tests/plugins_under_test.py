"""Which codegen plugins the correctness suites run on, and on which device.

cpu_cpp always (CPU tensors). cuda_triton on a GPU when there is one, else
through Triton's interpreter on CPU tensors (conftest sets TRITON_INTERPRET=1
before Triton is imported when no GPU is visible).
"""

from __future__ import annotations

import os

import pytest
import torch

_CUDA = torch.cuda.is_available()


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return _CUDA or os.environ.get("TRITON_INTERPRET") == "1"


PLUGINS = [
    "cpu_cpp",
    pytest.param(
        "cuda_triton",
        marks=pytest.mark.skipif(
            not _triton_available(), reason="Triton missing (pip install triton)"
        ),
    ),
]


def device_of(plugin: str) -> str:
    return "cuda" if plugin == "cuda_triton" and _CUDA else "cpu"
