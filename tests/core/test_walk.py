"""Issue 38's measure of how easy a compile is to follow: one ATen graph, traced through a
compile with cpu_cpp (``tests/walk.py`` says how), returns to a file it already left at most 4
times (the review of ``8741111`` counted 14)."""

from __future__ import annotations

from tests.walk import Walk, small_graph_walk


def test_the_walk_counts_returns_to_a_file_already_left():
    walk = Walk(["a.py", "b.py", "a.py", "c.py", "b.py", "a.py"], [])
    assert walk.returns == {"a.py": 2, "b.py": 1}


def test_one_aten_graph_returns_to_a_file_already_left_at_most_4_times():
    walk = small_graph_walk()
    assert walk.files[0] == "core/stages/aot.py" and walk.files[-1] == "core/stages/wrap.py", walk
    assert "core/program.py" in walk.files, walk
    assert sum(walk.returns.values()) <= 4, walk
