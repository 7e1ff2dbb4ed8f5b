"""Adapter over Dynamo's symbolic sizes (its SymInts, their ShapeEnv and torch's sympy
functions): a SymInt as the IR's sympy size, the integers that are not sizes, and the
requirements a size's ``Max`` makes. :mod:`core.adapters.torch_private` re-exports its names.
Supported: torch 2.11 and 2.13.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from ..ir.symbols import FloorDiv, Mod, size_var


class SymbolicUnsupported(TypeError):
    """A symbolic size this SDK cannot express (the graph is compiled per shape instead)."""


#: Integer symbols that are not sizes (a non-positive offset, an int argument Dynamo made
#: dynamic), each replaced by its traced value while a symbolic compile runs: the program is
#: symbolic in the sizes and specialized on these, and its guard checks their values.
_specialized: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar(
    "sdk_specialized_symbols", default=MappingProxyType({})
)


@contextlib.contextmanager
def specializing(values: Mapping[str, int]) -> Iterator[None]:
    """Within the block, ``sym_size`` gives these symbols' values (by name) instead of the
    symbols."""
    token = _specialized.set(MappingProxyType(dict(values)))
    try:
        yield
    finally:
        _specialized.reset(token)


def _traced_values(env: Any) -> Mapping[Any, Any]:
    """The ShapeEnv's traced value of each backed symbol (none without a ShapeEnv)."""
    if env is None:
        return {}
    # (renamed in torch 2.13)
    return env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val


def non_size_symbols(values: Sequence[Any]) -> dict[str, int]:
    """The integer symbols of these graph inputs (SymInts, fake tensors' sizes, strides and
    offsets) that are not positive sizes, with their traced values. Raises
    :class:`SymbolicUnsupported` for one without a traced value (data-dependent), or one that
    is not itself an int input (nothing a guard could read its value from)."""
    out: dict[str, int] = {}

    def visit(x: Any) -> None:
        if not isinstance(x, torch.SymInt):
            return
        node = x.node
        env = getattr(node, "shape_env", None)
        for sym in node.expr.free_symbols:
            if (sym.is_integer and sym.is_positive) or sym.name in out:
                continue
            value = _traced_values(env).get(sym)
            if value is None:
                raise SymbolicUnsupported(
                    f"symbol {sym} has no traced value (data-dependent sizes are not supported)"
                )
            out[sym.name] = int(value)

    for v in values:
        if isinstance(v, torch.Tensor):
            for s in (*v.shape, *v.stride(), v.storage_offset()):
                visit(s)
        else:
            visit(v)
    whole = {
        v.node.expr.name for v in values if isinstance(v, torch.SymInt) and v.node.expr.is_Symbol
    }
    if set(out) - whole:
        raise SymbolicUnsupported(
            f"integer symbols {sorted(set(out) - whole)} are not sizes "
            "and not int inputs of the graph"
        )
    return out


#: Where :func:`sym_size` puts the requirements it makes (``(expr, 0)``: ``expr <= 0``,
#: over the IR's size symbols), while :func:`requiring` is active; None: it makes none.
_requirements: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "sdk_size_requirements", default=None
)


@contextlib.contextmanager
def requiring(sink: list) -> Iterator[None]:
    """Within the block, :func:`sym_size` reads ``Max(c, e)`` (an integer ``c``) as the
    side that holds at the traced sizes, and appends the requirement that it keeps holding
    to ``sink``. torch computes a contiguous tensor's strides as products of ``Max(1,
    size)``: Swin's windows of ``(s // 4 + 1) // 2`` patches make one that the size
    symbols' ranges do not settle (it is 0 where ``s < 4``)."""
    token = _requirements.set(sink)
    try:
        yield
    finally:
        _requirements.reset(token)


def requirements_made() -> list:
    """The requirements made so far under the innermost :func:`requiring` (none outside
    one)."""
    return list(_requirements.get() or ())


def sym_size(x: Any) -> Any:
    """An int, or the sympy expression (over Dynamo's size symbols) of a SymInt.

    Never the hint: ``int(symint)`` would silently specialize the compiled code on the
    compiling call's size (and add a guard that a backward graph's caller never checks).
    """
    if isinstance(x, torch.SymInt):
        node = x.node
        expr = node.expr
        env = getattr(node, "shape_env", None)
        if env is not None:
            expr = env.simplify(expr) if hasattr(env, "simplify") else expr
        return _to_index_expr(expr, env)
    if isinstance(x, (bool, torch.SymBool, torch.SymFloat)):
        raise SymbolicUnsupported(f"{x!r} is not a size")
    return int(x)


def same_size(a: Any, b: Any) -> bool:
    """Whether sizes ``a`` and ``b`` (ints or SymInts) are the same expression, without
    asking the ShapeEnv (``a == b`` on a SymInt adds a guard, and specializes the graph)."""

    def expr(x: Any) -> Any:
        if isinstance(x, torch.SymInt):
            return x.node.expr
        return _as_sympy(x) if isinstance(x, int) and not isinstance(x, bool) else None

    ea, eb = expr(a), expr(b)
    return ea is not None and eb is not None and bool(ea == eb)


def _to_index_expr(e: Any, env: Any = None) -> Any:
    """``e`` over the IR's size symbols (``env``: the ShapeEnv, for the traced values)."""
    import sympy
    from torch.utils._sympy import functions as tf

    def sub(x: Any) -> Any:
        return _as_sympy(_to_index_expr(x, env))

    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        value = _specialized.get().get(e.name)
        if value is not None:
            return value
        if not (e.is_integer and e.is_positive):
            raise SymbolicUnsupported(
                f"size symbol {e} is not a backed positive size "
                "(data-dependent sizes are not supported)"
            )
        return size_var(e.name)
    if e.is_Add or e.is_Mul:
        args = [sub(a) for a in e.args]
        return sympy.Add(*args) if e.is_Add else sympy.Mul(*args)
    if isinstance(e, (tf.FloorDiv, tf.CleanDiv)):
        return FloorDiv(*(sub(a) for a in e.args))
    if isinstance(e, tf.CeilToInt) and isinstance(e.args[0], tf.IntTrueDiv):
        # ceil(a / b) of integers, b > 0: (a + b - 1) // b (attention pads its log-sum-exp
        # to a multiple of 32 this way)
        a, b = (sub(x) for x in e.args[0].args)
        if not (b.is_Integer and b > 0):
            raise SymbolicUnsupported(f"size {e} divides by {b}")
        return FloorDiv(a + b - 1, b)
    if isinstance(e, tf.ModularIndexing):
        a, b, c = (sub(x) for x in e.args)
        return Mod(FloorDiv(a, b), c)
    if isinstance(e, (tf.Mod, tf.PythonMod)):
        return Mod(*(sub(a) for a in e.args))
    if isinstance(e, tf.PowByNatural) or (e.is_Pow and e.exp.is_Integer and int(e.exp) > 0):
        base, exp = e.args
        if not exp.is_Integer:
            raise SymbolicUnsupported(f"size {e} has a symbolic exponent")
        return sub(base) ** int(exp)
    if (
        isinstance(e, (sympy.Max, getattr(tf, "Max", sympy.Max)))
        and len(e.args) == 2
        and any(a.is_Integer for a in e.args)
    ):
        c, other = sorted(e.args, key=lambda a: not a.is_Integer)
        return _max_of(int(c), other, sub(other), env)
    raise SymbolicUnsupported(f"size expression {e} ({type(e).__name__})")


def _max_of(c: int, traced: Any, expr: Any, env: Any) -> Any:
    """``Max(c, expr)`` as the side that holds at the traced sizes, with the requirement
    that it keeps holding (see :func:`requiring`); ``traced``: ``expr`` over the trace's
    symbols, whose value ``env`` holds."""
    sink = _requirements.get()
    value = traced.xreplace(_traced_values(env))
    if sink is None or not value.is_Integer:
        raise SymbolicUnsupported(f"size expression Max({c}, {traced}) (Max)")
    if int(value) >= c:
        sink.append((c - expr, 0))
        return expr
    sink.append((expr - c, 0))
    return c


def _as_sympy(x: Any) -> Any:
    import sympy

    return sympy.Integer(x) if isinstance(x, int) else x


def shape_env_of(values: Iterable[Any]) -> Any:
    """The ShapeEnv behind the fake tensors or SymInts of a graph's example inputs."""
    for v in values:
        if isinstance(v, torch.SymInt):
            return v.node.shape_env
        if isinstance(v, FakeTensor) and v.fake_mode.shape_env is not None:
            return v.fake_mode.shape_env
    return None


def shape_env_state(env: Any) -> tuple[int, int]:
    """What changes when code specializes a size (``int(symint)``, ``if symint == 3``):
    the ShapeEnv's guard and replacement counts. Compare before and after a compile."""
    if env is None:
        return (0, 0)
    return (len(env.guards), len(env.replacements))


def size_hint_of(x: Any) -> int | None:
    """The value a SymInt had when the graph was traced (its hint), or None."""
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        return None if hint is None else int(hint)
    return int(x)
