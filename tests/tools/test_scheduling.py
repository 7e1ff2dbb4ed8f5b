"""How the suite is spread over pytest-xdist's workers (tests/conftest.py): each shared-fixture
module is one unit of work, whatever the pytest and pytest-xdist versions make of
``xdist_group`` marks (pytest-xdist 3.8 with pytest 9.2 ignored them: pytest-xdist#1386)."""

from __future__ import annotations

import pytest

from tests import conftest


class _Options:
    """What the controller of ``pytest -n 2`` (pyproject's ``--dist loadgroup``) answers."""

    def getvalue(self, name: str):
        return {"dist": "loadgroup", "numprocesses": 2, "tx": ["2*popen"]}[name]


def test_pyproject_asks_for_loadgroup(pytestconfig):
    assert "--dist loadgroup" in " ".join(pytestconfig.getini("addopts"))


def test_a_shared_fixture_module_is_one_unit_and_other_tests_are_their_own():
    pytest.importorskip("xdist")
    sched = conftest.pytest_xdist_make_scheduler(_Options(), None)
    for module in conftest.SHARED_FIXTURE_MODULES:
        units = {sched._split_scope(f"{module}::{t}") for t in ("test_a", "test_b[x-1]", "C::d")}
        assert units == {module}, units
    other = "tests/core/test_layout.py::test_adaptive_avg_pool2d[cpu_cpp-out0]"
    assert sched._split_scope(other) == other
