"""The walk of one ATen graph through a compile: which of the project's files the calls that
pass the graph on enter, in order, and how often a file already left is entered again
(issue 38: "returns to a file already left at most 4 times"; the review of ``8741111``
counted 14).

How it is measured (``python -m tests.walk`` prints it):

* one small function (a linear layer, GELU, a residual add and a reduction) compiles with
  ``sdk:cpu_cpp`` under ``torch.no_grad()`` (one inference ATen graph), the caches off (the
  whole-graph cache and AOTAutograd's: every stage runs);
* ``sys.setprofile`` sees every Python call while AOTAutograd's ATen graph is compiled, from
  the entry of the AOT stage's ``compile_aten`` to its return;
* a call counts when its function is in the project's ``core/`` or ``sdk/`` and an argument
  carries the graph: a ``torch.fx.GraphModule`` or ``torch.fx.Graph``, directly, in a list,
  tuple or dict argument, or as a field of a dataclass argument (a ``Job``'s ``gm``); a
  method's ``self`` does not count, nor an object that holds the graph (a lowerer handed to
  each op's lowering: what is passed on is one node, not the graph);
* the files those calls enter, consecutive repeats collapsed, are the walk; a file that
  appears again after another file is a return to a file already left.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
PROJECT = (str(ROOT / "core") + "/", str(ROOT / "sdk") + "/")


@dataclass
class Walk:
    #: the files entered, in order, consecutive repeats collapsed (relative to the root)
    files: list[str]
    #: the calls that passed the graph on: (file, function)
    calls: list[tuple[str, str]]

    @property
    def returns(self) -> collections.Counter[str]:
        """How often each file was entered again after the walk had left it."""
        seen: set[str] = set()
        out: collections.Counter[str] = collections.Counter()
        for f in self.files:
            if f in seen:
                out[f] += 1
            seen.add(f)
        return out

    def __str__(self) -> str:
        r = self.returns
        head = (
            f"{len(set(self.files))} files, {len(self.files)} entries, "
            f"{sum(r.values())} returns to a file already left"
            + (f" ({', '.join(f'{f} x{n}' for f, n in r.most_common())})" if r else "")
        )
        return head + "\n" + " -> ".join(self.files)


def _is_graph(v: Any) -> bool:
    return isinstance(v, (torch.fx.GraphModule, torch.fx.Graph))


def _carries_graph(v: Any) -> bool:
    if _is_graph(v):
        return True
    if isinstance(v, (list, tuple)):
        return any(_is_graph(x) for x in v[:8])
    if isinstance(v, dict):
        return any(_is_graph(x) for x in list(v.values())[:8])
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return any(_is_graph(getattr(v, f.name, None)) for f in dataclasses.fields(v))
    return False


def _arguments(frame: Any) -> list[Any]:
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    names = code.co_varnames[:n]
    values = []
    for name in names:
        if name in ("self", "cls"):
            continue  # (an object's method works on what it holds: no graph passed on)
        v = frame.f_locals.get(name)
        if isinstance(v, tuple) and name == code.co_varnames[n - 1 - bool(code.co_flags & 0x08)]:
            values.extend(v[:8])  # (*args)
        values.append(v)
    return values


def trace(fn: Any, *args: Any) -> Walk:
    """Compile and run ``fn(*args)`` (``fn`` is what ``torch.compile`` returned); the walk of
    its ATen graph."""
    calls: list[tuple[str, str]] = []
    state = {"depth": 0, "frame": None}

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_name == "compile_aten" and state["frame"] is None:
            if code.co_filename.endswith("stages/aot.py"):
                state["frame"] = frame
        elif event == "return" and frame is state["frame"]:
            state["frame"] = False  # (one ATen graph: stop)
        if event != "call" or not state["frame"]:
            return
        path = code.co_filename
        if not path.startswith(PROJECT):
            return
        if any(_carries_graph(v) for v in _arguments(frame)):
            calls.append((str(Path(path).relative_to(ROOT)), code.co_name))

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    if state["frame"] is None:
        raise RuntimeError("no ATen graph was compiled (served from a cache?)")
    files: list[str] = []
    for f, _ in calls:
        if not files or files[-1] != f:
            files.append(f)
    return Walk(files, calls)


def small_graph_walk() -> Walk:
    """The walk of the module docstring's function."""
    import sdk

    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 16)

    def f(x: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.gelu(linear(x)) + x).sum(-1)

    sdk.reset()
    compiled = torch.compile(f, backend=sdk.backend("cpu_cpp", cache=False))
    with torch.no_grad():
        return trace(compiled, torch.randn(4, 16))


if __name__ == "__main__":
    walk = small_graph_walk()
    print(walk)
    if "-v" in sys.argv:
        for f, name in walk.calls:
            print(f"  {f}: {name}")
