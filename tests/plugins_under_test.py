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


def skip_model_under_interpreter(plugin: str, seconds: int) -> None:
    """Skip a whole-model run of cuda_triton through Triton's interpreter.

    For tests that ``tests/gpu/run.sh`` runs on a GPU, where a model's interpreted kernels cost
    minutes of CI's two cores and check nothing the smaller interpreted tests do not: the
    core's side of the case still runs through cpu_cpp here.
    """
    if plugin == "cuda_triton" and not _CUDA:
        pytest.skip(
            f"cuda_triton on a whole model through Triton's interpreter (~{seconds} s on 2 "
            "cores): tests/gpu/run.sh runs this case on a GPU"
        )


def wait_for_workers(workers, seconds: float = 120.0) -> None:
    """Wait until started compile workers (``sdk.workers``) answer; fails naming why they
    did not start, or after ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while not workers.ready:
        assert workers.why_not() is None, workers.why_not()
        assert time.monotonic() < deadline, f"the compile workers did not start in {seconds:g} s"
        time.sleep(0.1)
