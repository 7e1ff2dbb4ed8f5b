"""How easy a compile is to follow (issues 38 and 48): one training step's forward and
backward ATen graphs, traced through every artifact of their compile with cpu_cpp
(``tests/walk.py`` says how), each return to a file it already left at most 6 times; the
build stages' driver owns their order (the review of ``8741111`` counted 14 returns for the
inference graph up to the lowering; issue 48, before its stage table: 8 per graph through
every artifact, ``core/program.py`` 3 times)."""

from __future__ import annotations

import pytest

from tests.walk import Walk, small_graph_walk, training_walks

#: the build stages in the order the driver runs them (core/build_stages)
BUILD = ["passes", "lower", "schedule", "render", "compile", "measure", "program"]
STAGE_FILES = [
    "core/build_stages/rewrite.py",
    "core/build_stages/lower.py",
    "core/build_stages/schedule.py",
    "core/build_stages/render.py",
    "core/build_stages/compile.py",
    "core/build_stages/measure.py",
    "core/build_stages/assemble.py",
]


def test_the_walk_counts_returns_to_a_file_already_left():
    walk = Walk(["a.py", "b.py", "a.py", "c.py", "b.py", "a.py"], [])
    assert walk.returns == {"a.py": 2, "b.py": 1}


@pytest.fixture(scope="module")
def walks() -> dict[str, Walk]:
    return training_walks()


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_a_training_graph_returns_to_a_file_already_left_at_most_6_times(walks, kind):
    walk = walks[kind]
    assert walk.files[0] == "core/stages/aot.py" and walk.files[-1] == "core/stages/wrap.py", walk
    # through every artifact: the graph, its IR kernels, their sources, the compiled
    # kernels and the program
    assert sum(walk.returns.values()) <= 6, walk
    # the driver enters each stage once, in the table's order, and nothing calls back
    # into the driver or into core/program.py, which called it
    entered = [f for f in walk.files if f in STAGE_FILES]
    assert entered == STAGE_FILES, walk
    assert walk.files.count("core/build_stages/__init__.py") == 1, walk
    assert walk.files.count("core/program.py") == 1, walk
    # the inspection hook, called by the driver in its own file: once after each stage
    assert walk.inspections == BUILD, walk.inspections


def test_the_inference_graph_is_followed_too():
    walk = small_graph_walk()
    assert walk.files[-1] == "core/stages/wrap.py" and "core/program.py" in walk.files, walk
    assert sum(walk.returns.values()) <= 6, walk
