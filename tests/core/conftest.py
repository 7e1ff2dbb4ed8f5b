"""Fixtures shared by the core's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """The whole-graph cache on, over private SDK and torch cache directories of the test."""
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    return tmp_path
