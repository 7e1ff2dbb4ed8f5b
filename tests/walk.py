"""The walk of one ATen graph through a compile: which of the project's files the calls that
pass the graph, or an artifact made of it, on enter, in order, and how often a file already
left is entered again (issue 38 counted the inference graph up to the lowering; issue 48: "a
file already left is re-entered at most 6 times per ATen graph", following one training
step's forward and backward graphs through every artifact).

How it is measured (``python -m tests.walk`` prints it):

* one small function (a linear layer, GELU, a residual add and a reduction) compiles with
  ``sdk:cpu_cpp``, the caches off (the whole-graph cache and AOTAutograd's: every stage
  runs): under ``torch.no_grad()`` (one inference ATen graph, :func:`small_graph_walk`), or
  for one training step, forward and backward (:func:`training_walks`);
* ``sys.setprofile`` sees every Python call while each ATen graph is compiled, from the entry
  of the AOT stage's ``compile_aten`` to its return (the backward's, at the first backward);
* a call counts when its function is in the project's ``core/`` or ``sdk/`` and an argument
  carries the graph or an artifact made of it, the issue's list: the ``torch.fx.GraphModule``
  (or ``Graph``), the IR kernels, their sources, the compiled kernels (what the plugin's
  ``sdk_compile_kernels`` returned), the program (a ``Wrapper``), or one of the build stages'
  typed artifacts (``core.build_stages.ARTIFACTS``); directly, in a list, tuple, set or dict
  argument, or as a field of a dataclass argument (a ``Job``'s ``gm``). A part alone (one
  kernel, one source: a plugin's ``render`` of a kernel) is not the graph; nor is a method's
  ``self``, nor an object that holds the graph (a lowerer handed to each op's lowering: what
  is passed on is one node), nor a stage's working state (the scheduler's fusion groups and
  IR nodes: the schedule stage's own business until it hands over kernels);
* a call from a file to a function of the same file does not enter a file: the walk is
  where the graph crosses between files. The build stages' driver (``core.build_stages.run``)
  hands each stage's artifact to its inspection hook (``core.build_stages.inspect``, in the
  driver's own file: the ``TORCH_LOGS=+sdk`` line and the times ``sdk.explain`` reports);
  those calls stay in the driver's file. Each is listed (``Walk.inspections``, one stage
  name per call), and an observer added with ``inspecting`` in another project file would
  count as that file's entries like any call;
* the files those calls enter, consecutive repeats collapsed, are the walk; a file that
  appears again after another file is a return to a file already left.

Before issue 48's stage table, each training graph returned 8 times to a file already left
(``core/program.py`` 3 times, the build's hub: it called the lowering, the passes and the
codegen and was called back between them); after it, 2 (both in the ``program`` stage:
``core/wrapper.py``'s writer, then its runner's and the steps' one-line descriptions).
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import threading
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
    #: the build stages' driver's calls of its inspection hook, by stage name, in order
    inspections: list[str] = dataclasses.field(default_factory=list)

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
        seen = f"\ninspected after: {', '.join(self.inspections)}" if self.inspections else ""
        return head + "\n" + " -> ".join(self.files) + seen


def _whole(v: Any) -> bool:
    """An artifact that is the whole graph's: the ATen graph, the program, a stage's."""
    return isinstance(v, _WHOLE)


def _part(v: Any, compiled: dict[int, Any]) -> bool:
    """A part of an artifact (an IR node, a kernel, a source, a compiled kernel)."""
    return isinstance(v, _PARTS) or id(v) in compiled


def _carries(v: Any, compiled: dict[int, Any], depth: int = 0) -> bool:
    if _whole(v):
        return True
    if _part(v, compiled):
        return False  # (one kernel, one source: a part, not the graph)
    if isinstance(v, (list, tuple, set, frozenset)):
        items = list(v)[:8]
    elif isinstance(v, dict):
        items = list(v.values())[:8]
    elif dataclasses.is_dataclass(v) and not isinstance(v, type) and depth == 0:
        return any(_carries(getattr(v, f.name, None), compiled, 1) for f in dataclasses.fields(v))
    else:
        return False
    return any(_whole(x) or _part(x, compiled) for x in items)


def _arguments(frame: Any) -> list[Any]:
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    names = code.co_varnames[:n]
    stars = names[-1] if code.co_flags & 0x08 else None
    star = names[n - 1 - bool(code.co_flags & 0x08)] if code.co_flags & 0x04 else None
    values: list[Any] = []
    for name in names:
        if name in ("self", "cls"):
            continue  # (an object's method works on what it holds: no graph passed on)
        v = frame.f_locals.get(name)
        if name == star:
            values.extend(v[:8])  # (*args: each argument, not the tuple that packs them)
        elif name == stars:
            values.extend(list(v.values())[:8])  # (**kwargs: likewise)
        else:
            values.append(v)
    return values


def _artifact_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    from sdk.core import build_stages
    from sdk.core.wrapper import Wrapper
    from sdk.ir.kernel import Kernel
    from sdk.plugin import KernelSource

    whole = (torch.fx.GraphModule, torch.fx.Graph, Wrapper, *build_stages.ARTIFACTS)
    return whole, (Kernel, KernelSource)


_WHOLE: tuple[type, ...] = ()
_PARTS: tuple[type, ...] = ()


def trace(fn: Any, *args: Any, step: Any = None) -> dict[str, Walk]:
    """Compile and run ``fn(*args)`` (``fn`` is what ``torch.compile`` returned), then
    ``step(out)`` where given (a backward); the walk of each ATen graph compiled meanwhile,
    by its kind (``"inference"``, ``"forward"``, ``"backward"``)."""
    global _WHOLE, _PARTS
    _WHOLE, _PARTS = _artifact_types()
    from sdk.core import build_stages

    hook = build_stages.inspect.__code__
    walks: dict[str, list[tuple[str, str]]] = {}
    inspections: dict[str, list[str]] = {}
    compiled: dict[int, Any] = {}  # id -> the compiled kernel (kept alive: ids stay unique)
    state: dict[str, Any] = {"frame": None, "kind": None}

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "return" and code.co_name == "sdk_compile_kernels" and arg:
            compiled.update((id(f), f) for f in arg)  # (the plugin's hook: its callables)
        if event == "call" and code.co_name == "compile_aten" and state["frame"] is None:
            if code.co_filename.endswith("stages/aot.py"):
                state["frame"], state["kind"] = frame, frame.f_locals["kind"]
        elif event == "return" and frame is state["frame"]:
            state["frame"] = None  # (this ATen graph is compiled; the next may come)
        if event != "call" or state["frame"] is None:
            return
        if code is hook:  # (listed: the driver hands each stage's artifact to its hook)
            inspections.setdefault(state["kind"], []).append(frame.f_locals["stage"])
        path = code.co_filename
        if not path.startswith(PROJECT):
            return
        caller = frame.f_back
        if caller is not None and caller.f_code.co_filename == path:
            return  # (a call within one file enters no file)
        if any(_carries(v, compiled) for v in _arguments(frame)):
            calls = walks.setdefault(state["kind"], [])
            calls.append((str(Path(path).relative_to(ROOT)), code.co_name))

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        out = fn(*args)
        if step is not None:
            step(out)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    if not walks:
        raise RuntimeError("no ATen graph was compiled (served from a cache?)")
    result = {}
    for kind, calls in walks.items():
        files: list[str] = []
        for f, _ in calls:
            if not files or files[-1] != f:
                files.append(f)
        result[kind] = Walk(files, calls, inspections.get(kind, []))
    return result


def _small_function() -> Any:
    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 16)

    def f(x: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.gelu(linear(x)) + x).sum(-1)

    return f


def small_graph_walk() -> Walk:
    """The walk of the module docstring's function's inference graph."""
    import sdk

    sdk.reset()
    compiled = torch.compile(_small_function(), backend=sdk.backend("cpu_cpp", cache=False))
    with torch.no_grad():
        return trace(compiled, torch.randn(4, 16))["inference"]


def training_walks() -> dict[str, Walk]:
    """The walks of the module docstring's function's forward and backward graphs, for one
    training step (the backward compiles at the first ``backward()``)."""
    import sdk

    sdk.reset()
    compiled = torch.compile(_small_function(), backend=sdk.backend("cpu_cpp", cache=False))
    walks = trace(
        compiled, torch.randn(4, 16, requires_grad=True), step=lambda y: y.sum().backward()
    )
    if set(walks) != {"forward", "backward"}:
        raise RuntimeError(f"a training step compiled {sorted(walks)}, not forward and backward")
    return walks


if __name__ == "__main__":
    for kind, walk in (
        training_walks().items()
        if "--inference" not in sys.argv
        else [("inference", small_graph_walk())]
    ):
        print(f"{kind}: {walk}")
        if "-v" in sys.argv:
            for f, name in walk.calls:
                print(f"  {f}: {name}")
