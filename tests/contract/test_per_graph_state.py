"""Issue 48: per-graph state lives in the job, not on the session.

A :class:`core.pipeline.Session` is shared by everything its Dynamo graph's compile makes (a
forward, its backward compiled later in autograd's thread, a chain's peers and partitions), so
a value that belongs to one graph (its number, its AOTAutograd cache tag, when it was captured,
what AOTAutograd took) lives in :class:`core.stages.capture.Capture` or the stage's
``Job``/``Built``: no module of ``core/`` assigns an attribute of a ``session``, except where
:data:`ALLOWED` says why. Read with :mod:`ast` (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: (module, attribute) assignments onto a ``session`` that remain, each with why.
ALLOWED = {
    # Backend.__call__ fills in the session it has just made for this one Dynamo graph,
    # before any stage runs: why Dynamo ended the graph, and the record's report list
    ("core/pipeline.py", "graph_break"): "set once, by its maker, before the stages",
    ("core/pipeline.py", "sinks"): "set once, by its maker, before the stages",
    # Session._chained: a chained plugin's session shares the root's collectors and tables
    ("core/pipeline.py", "_chain_state"): "set once, by its maker, before the stages",
}


def session_writes(source: str) -> list[tuple[str, int]]:
    """``(attribute, line)`` of each assignment (plain, augmented, annotated, in a tuple,
    or through ``setattr``) onto a name ``session``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "session"
        ):
            name = node.args[1].value if isinstance(node.args[1], ast.Constant) else "?"
            found.append((str(name), node.lineno))
        while targets:
            t = targets.pop()
            if isinstance(t, ast.Tuple | ast.List):
                targets.extend(t.elts)
            elif isinstance(t, ast.Starred):
                targets.append(t.value)
            elif (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "session"
            ):
                found.append((t.attr, t.lineno))
    return found


def _all_writes() -> dict[tuple[str, str], list[int]]:
    writes: dict[tuple[str, str], list[int]] = {}
    for path in sorted((ROOT / "core").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for attr, line in session_writes(path.read_text()):
            writes.setdefault((rel, attr), []).append(line)
    return writes


def test_no_stage_writes_per_graph_state_onto_the_session():
    writes = _all_writes()
    bad = [f"{rel}:{lines[0]}: session.{attr} =" for (rel, attr), lines in writes.items()]
    bad = [b for (key, b) in zip(writes, bad, strict=True) if key not in ALLOWED]
    assert not bad, (
        "per-graph state goes in core/stages/capture.py's Capture or the Job, not on the "
        f"session: {sorted(bad)}"
    )
    # the stages in particular assign nothing onto it
    assert not [key for key in writes if key[0].startswith("core/stages/")]


def test_the_allow_list_names_only_what_is_still_assigned():
    assert set(ALLOWED) <= set(_all_writes()), set(ALLOWED) - set(_all_writes())


def test_a_session_write_is_caught():
    source = (
        "def run(session, x):\n"
        "    session.graph_id = 1\n"
        "    session.cache_tag, session.warm = x\n"
        "    session.aot_seconds += 1.0\n"
        "    session.captured: float = 0.0\n"
        "    setattr(session, 'broken', 'why')\n"
    )
    assert sorted(a for a, _ in session_writes(source)) == [
        "aot_seconds",
        "broken",
        "cache_tag",
        "captured",
        "graph_id",
        "warm",
    ]


def test_reading_the_session_and_writing_elsewhere_pass():
    source = (
        "def run(session, capture, report):\n"
        "    capture.aot_seconds = session.options.fallback\n"
        "    report.warm = session.info.name\n"
        "    other = session\n"
    )
    assert session_writes(source) == []


#: the methods that change a container in place
_MUTATING = frozenset(
    {"append", "extend", "update", "add", "setdefault", "pop", "clear", "insert", "remove"}
)


def session_mutations(source: str) -> list[tuple[str, int]]:
    """``(what, line)`` of each change made through a parameter annotated as a session
    (``CompileSession`` or ``Session``, whatever its name): an assignment onto one of its
    attributes or items (``peer.x = ...``, ``s.tables[k] = ...``), or a mutating call on one
    (``s.notes.append(...)``)."""

    def root(e: ast.expr) -> str | None:
        while isinstance(e, ast.Attribute | ast.Subscript):
            e = e.value
        return e.id if isinstance(e, ast.Name) else None

    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        names = {
            a.arg
            for a in params
            if a.annotation is not None
            and ast.unparse(a.annotation).split(".")[-1] in ("CompileSession", "Session")
        }
        for node in ast.walk(fn) if names else ():
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute | ast.Subscript) and root(t) in names:
                    found.append((ast.unparse(t), node.lineno))
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATING
                and isinstance(node.func.value, ast.Attribute | ast.Subscript)
                and root(node.func.value) in names
            ):
                found.append((ast.unparse(node.func), node.lineno))
    return found


def test_no_stage_changes_a_session_under_any_name():
    # the stages (core/stages, and the build's, core/build_stages) and the modules they call
    # take the session as a parameter: none changes it, whatever it calls it
    bad = [
        f"{path.relative_to(ROOT).as_posix()}:{line}: {what}"
        for path in sorted((ROOT / "core").rglob("*.py"))
        for what, line in session_mutations(path.read_text())
    ]
    assert not bad, bad


def test_a_session_change_under_another_name_is_caught():
    source = (
        "def run(peer: CompileSession, s: core.session.Session, other):\n"
        "    peer.graph_id = 1\n"
        "    s.tables['x'] = 2\n"
        "    s.notes.append('y')\n"
        "    other.warm = 3\n"  # (not annotated: not a session parameter)
        "    print(peer.options.fallback)\n"
    )
    assert sorted(w for w, _ in session_mutations(source)) == [
        "peer.graph_id",
        "s.notes.append",
        "s.tables['x']",
    ]
