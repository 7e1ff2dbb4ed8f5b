"""The GPU suite: skipped where no CUDA device is visible (CI), run by tests/gpu/run.sh."""

from __future__ import annotations

import os

import pytest
import torch

# the mode matrix runs with torch.use_deterministic_algorithms(True) too: cuBLAS is then
# deterministic only with a fixed workspace, read when its first handle is made
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: run tests/gpu/run.sh on a GPU machine")
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/"):
            item.add_marker(skip)
