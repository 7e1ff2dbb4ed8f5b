"""What a compiled graph assumes about its inputs, checked on every call.

Dynamo guards sizes, dtypes and devices of the user's inputs. Generated
kernels also bake in strides, storage offsets and pointer alignment, and a
backward graph's inputs are not Dynamo-guarded at all. A :class:`Specializing`
graph records those assumptions per variant and checks them with one
generated Python function (a handful of tuple compares per input); on a
mismatch it compiles a variant for the new layout instead of computing a wrong
result.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from sympy.printing.str import StrPrinter

from .ir.index import MIN_SIZE, FloorDiv, Mod, is_static, print_size, print_sizes, size_symbols

ALIGNMENT = 16  # bytes


@dataclass(frozen=True)
class TensorSpec:
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    device: torch.device
    aligned: bool

    @classmethod
    def of(cls, t: torch.Tensor, *, real: bool = True) -> TensorSpec:
        return cls(
            tuple(int(s) for s in t.shape),
            tuple(int(s) for s in t.stride()),
            int(t.storage_offset()),
            t.dtype,
            t.device,
            # fake tensors have no address: assume aligned, the first call checks
            (t.data_ptr() % ALIGNMENT == 0) if real else True,
        )


InputSpec = Any  # TensorSpec, or the int / float / None value of a non-tensor input


def spec_of(x: Any, *, real: bool = True) -> InputSpec:
    if isinstance(x, torch.Tensor):
        return TensorSpec.of(x, real=real)
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        return int(hint) if hint is not None else None
    return x


def is_symbolic(specs: Sequence[InputSpec]) -> bool:
    """True when some input's sizes, strides or offset are sympy expressions."""
    for spec in specs:
        if isinstance(spec, TensorSpec):
            if not all(is_static(x) for x in (*spec.sizes, *spec.strides, spec.offset)):
                return True
        elif isinstance(spec, sympy.Expr) and not spec.is_Integer:
            return True
    return False


def size_bindings(specs: Sequence[InputSpec]) -> dict[sympy.Symbol, str]:
    """Where each size symbol's value is read at run time: ``args[i]`` (an int input) or
    ``args[i].size(d)``, the first input that has it as a whole size. Raises TypeError
    when a symbol appears only inside larger expressions (nothing to read it from)."""
    return {
        sym: f"args[{i}]" if d is None else f"args[{i}].size({d})"
        for sym, (i, d) in size_sources(specs).items()
    }


def size_sources(specs: Sequence[InputSpec]) -> dict[sympy.Symbol, tuple[int, int | None]]:
    """:func:`size_bindings` as data: each size symbol's input position, and the dimension
    whose size it is (None: the input is the int itself)."""
    where: dict[sympy.Symbol, tuple[int, int | None]] = {}
    for i, spec in enumerate(specs):
        if isinstance(spec, sympy.Symbol):
            where.setdefault(spec, (i, None))
        elif isinstance(spec, TensorSpec):
            for d, sz in enumerate(spec.sizes):
                if isinstance(sz, sympy.Symbol):
                    where.setdefault(sz, (i, d))
    used = size_symbols(
        *(
            x
            for spec in specs
            for x in (
                (*spec.sizes, *spec.strides, spec.offset)
                if isinstance(spec, TensorSpec)
                else (spec,)
            )
            if isinstance(x, sympy.Expr)
        )
    )
    unbound = used - set(where)
    if unbound:
        raise TypeError(
            f"size symbols {sorted(map(str, unbound))} are not the size of any input dimension"
        )
    return where


def parse_requires(requires: Sequence[tuple[str, int]]) -> list[tuple[sympy.Expr, int]]:
    """A program's size requirements (``KernelSource.requires``: an expression over size
    symbols, a limit) as sympy expressions. Read without ``eval`` (they come from the
    whole-graph cache too): integers, names, ``+ - *``, ``/`` and ``**`` by an integer,
    ``//`` and ``%`` (a size's floor division and remainder, as ``print_size`` writes
    them); ValueError naming the requirement that is something else."""
    out = []
    for item in requires:
        try:
            text, limit = item
            if not isinstance(limit, int) or isinstance(limit, bool):
                raise ValueError("the limit is not an int")
            out.append((_size_expr(ast.parse(text, mode="eval").body), limit))
        except (ValueError, TypeError, SyntaxError) as exc:
            raise ValueError(
                f"size requirement {item!r} is not (an expression over size arguments with "
                f"+ - * /, an int): {exc}"
            ) from exc
    return out


class _RequirementPrinter(StrPrinter):
    """sympy's text, with a size's floor division and remainder as ``//`` and ``%``."""

    def _print_FloorDiv(self, e: Any) -> str:
        return f"(({self._print(e.args[0])}) // ({self._print(e.args[1])}))"

    def _print_Mod(self, e: Any) -> str:
        return f"(({self._print(e.args[0])}) % ({self._print(e.args[1])}))"


def requirement_text(expr: sympy.Expr) -> str:
    """A size requirement's expression as text :func:`parse_requires` reads back."""
    return _RequirementPrinter().doprint(expr)


_ARITH = {ast.Add: sympy.Add, ast.Mult: sympy.Mul}


def _size_expr(node: ast.AST) -> sympy.Expr:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sympy.Integer(node.value)
    if isinstance(node, ast.Name):
        return sympy.Symbol(node.id, integer=True, positive=True)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_size_expr(node.operand)
    if isinstance(node, ast.BinOp):
        a, b = _size_expr(node.left), _size_expr(node.right)
        if type(node.op) in _ARITH:
            return _ARITH[type(node.op)](a, b)
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Div) and b.is_Integer and int(b) > 0:
            return a / b
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and not b.is_nonpositive:
            # (a divisor of sizes, not provably positive: the check requires it is, first)
            return (FloorDiv if isinstance(node.op, ast.FloorDiv) else Mod)(a, b)
        if isinstance(node.op, ast.Pow) and b.is_Integer and 0 <= int(b) <= 8:
            return a**b
    raise ValueError(f"{ast.unparse(node)!r} is not size arithmetic")


def _requires_lines(
    specs: Sequence[InputSpec], requires: Sequence[tuple[str, int]], bound: bool
) -> list[str]:
    """Lines of a generated check that return False where the call's sizes break a size
    requirement: each symbol read from its input (unless ``bound``: already read), then
    ``expr <= limit`` in integers (``expr``'s denominators multiplied out)."""
    if not requires:
        return []
    parsed = parse_requires(requires)
    where = {sym.name: src for sym, src in size_bindings(specs).items()}
    names = sorted({s.name for e, _ in parsed for s in e.free_symbols})
    missing = [n for n in names if n not in where]
    if missing:
        raise ValueError(
            f"size requirements name {missing}, not the size of any input dimension "
            f"(the sizes are {sorted(where)})"
        )
    lines = [] if bound else [f"    {n} = {where[n]}" for n in names]
    for expr, limit in parsed:
        # a divisor of sizes that may not be positive (Swin's padded windows, ``w //
        # (w // 4)``): the requirement does not hold where it is not, innermost first
        for div in _symbolic_divisors(expr):
            lines += [f"    if {print_size(div)} <= 0:", "        return False"]
        num, den = sympy.fraction(sympy.together(expr))
        lines += [f"    if {print_size(num)} > {limit * int(den)}:", "        return False"]
    return lines


def _symbolic_divisors(expr: sympy.Expr) -> list[sympy.Expr]:
    """The divisors of ``expr``'s floor divisions and remainders that are not integers,
    the innermost first."""
    out: list[sympy.Expr] = []
    for node in sympy.postorder_traversal(expr):
        divisor = node.args[1] if isinstance(node, (FloorDiv, Mod)) else None
        if divisor is not None and not divisor.is_Integer and divisor not in out:
            out.append(divisor)
    return out


def _symbolic_check(
    specs: Sequence[InputSpec],
    layout_free: frozenset[int],
    kernel_read: frozenset[int] | None,
    requires: Sequence[tuple[str, int]] = (),
) -> Callable[[Sequence[Any]], bool]:
    """The check of a variant compiled for symbolic sizes: bind each size symbol from the
    input that first has it, require it >= MIN_SIZE (what the kernels assume), and check
    every input's sizes, strides and offset against their expressions at those values
    (sizes only for the ``layout_free`` inputs, which reach library calls whole)."""
    env: dict[str, Any] = {}
    lines = ["def check(args):"]
    for sym, src in size_bindings(specs).items():
        lines += [
            f"    {sym.name} = {src}",
            f"    if {sym.name} < {MIN_SIZE}:",
            "        return False",
        ]
    lines += _requires_lines(specs, requires, bound=True)
    for i, spec in enumerate(specs):
        if isinstance(spec, TensorSpec) and i in layout_free:
            # its device too may differ from the trace's: the meta kernels of GPU attention
            # give its 0-dim int64 RNG state as a GPU tensor, the real kernels on the CPU
            lines += [
                f"    if args[{i}].shape != {print_sizes(spec.sizes)}:",
                "        return False",
            ]
        elif isinstance(spec, TensorSpec):
            env[f"d{i}"] = spec.device
            cond = (
                f"a.size() != {print_sizes(spec.sizes)} or a.stride() != "
                f"{print_sizes(spec.strides)} or a.storage_offset() != "
                f"{print_size(spec.offset)} or a.device != d{i}"
            )
            if spec.aligned and (kernel_read is None or i in kernel_read):
                cond += f" or a.data_ptr() % {ALIGNMENT}"
            lines += [f"    a = args[{i}]", f"    if {cond}:", "        return False"]
        elif isinstance(spec, sympy.Expr):
            lines += [f"    if args[{i}] != {print_size(spec)}:", "        return False"]
        elif isinstance(spec, (int, float, bool)) or spec is None:
            lines += [f"    if args[{i}] != {spec!r}:", "        return False"]
    lines.append("    return True")
    exec("\n".join(lines), env)  # noqa: S102 - our own generated code
    return env["check"]


def make_check(
    specs: Sequence[InputSpec],
    layout_free: frozenset[int] = frozenset(),
    dynamo_guarded: bool = False,
    kernel_read: frozenset[int] | None = None,
    requires: Sequence[tuple[str, int]] = (),
) -> Callable[[Sequence[Any]], bool]:
    """A generated function that is True when ``args`` match ``specs``.

    Per-call Python work grows with the input count (a convnet has two hundred
    parameters), so each input is checked for what the variant assumes of it:

    * ``layout_free`` (positions): handed whole to library calls, which take any
      strides: sizes only.
    * ``dynamo_guarded``: Dynamo's guards already hold every input's sizes, strides,
      dtype and device (the inputs of a forward or inference graph with static shapes),
      and views of inputs are taken relative to their storage offset, so what is left is
      the pointer alignment the kernels of ``kernel_read`` were compiled for.
    * ``requires``: the kernels' size requirements (``KernelSource.requires``), which a
      program of symbolic sizes holds only for some sizes.
    """
    lines = ["def check(args):"]
    env: dict[str, Any] = {}
    # (with symbolic sizes too: Dynamo's guards then hold each size symbol's range, sizes
    # 0 and 1 recompile, and every size and stride relation the trace used)
    if dynamo_guarded and kernel_read is not None:
        for i, spec in enumerate(specs):
            if isinstance(spec, TensorSpec) and spec.aligned and i in kernel_read:
                lines += [f"    if args[{i}].data_ptr() % {ALIGNMENT}:", "        return False"]
            elif isinstance(spec, int) and not isinstance(spec, bool):
                # an int input of a symbolic graph that the variant specialized on (Dynamo
                # guards only its range)
                lines += [f"    if args[{i}] != {spec}:", "        return False"]
        lines += _requires_lines(specs, requires, bound=False)
        lines.append("    return True")
        exec("\n".join(lines), env)  # noqa: S102 - our own generated code
        return env["check"]
    if is_symbolic(specs):
        return _symbolic_check(specs, layout_free, kernel_read, requires)
    for i, spec in enumerate(specs):
        if isinstance(spec, TensorSpec) and i in layout_free:
            env[f"s{i}"] = spec.sizes
            lines += [f"    if args[{i}].shape != s{i}:", "        return False"]
        elif isinstance(spec, TensorSpec):
            env[f"s{i}"], env[f"t{i}"], env[f"d{i}"] = spec.sizes, spec.strides, spec.device
            cond = (
                f"a.size() != s{i} or a.stride() != t{i} or a.storage_offset() != {spec.offset}"
                f" or a.device != d{i}"
            )
            if spec.aligned:
                cond += f" or a.data_ptr() % {ALIGNMENT}"
            lines += [f"    a = args[{i}]", f"    if {cond}:", "        return False"]
        elif isinstance(spec, (int, float, bool)) or spec is None:
            lines += [f"    if args[{i}] != {spec!r}:", "        return False"]
    lines.append("    return True")
    exec("\n".join(lines), env)  # noqa: S102 - our own generated code
    return env["check"]


def native_guard(
    specs: Sequence[InputSpec],
    layout_free: frozenset[int] = frozenset(),
    dynamo_guarded: bool = False,
    kernel_read: frozenset[int] | None = None,
) -> list[tuple] | None:
    """What :func:`make_check` checks, as the native runner's per-input entries
    (``Program.guard``, core/runner.cpp): (mode, sizes, strides, offset, device, aligned),
    mode 0 nothing, 1 sizes, 2 sizes, strides, offset and device. None where the runner
    cannot check it (symbolic sizes, an input that is not a tensor)."""
    if is_symbolic(specs) or not all(isinstance(s, TensorSpec) for s in specs):
        return None
    out = []
    for i, spec in enumerate(specs):
        dev = str(spec.device)
        if dynamo_guarded and kernel_read is not None:
            out.append((0, (), (), 0, dev, spec.aligned and i in kernel_read))
        elif i in layout_free:
            out.append((1, spec.sizes, (), 0, dev, False))
        else:
            out.append((2, spec.sizes, spec.strides, spec.offset, dev, spec.aligned))
    return out


class Specializing:
    """A compiled graph that re-specializes when an input breaks its assumptions.

    ``build(specs)`` compiles a variant for inputs of those specs. Called with a
    graph's inputs as positional arguments; returns the outputs.
    """

    def __init__(
        self,
        build: Callable[[tuple[InputSpec, ...]], Callable],
        specs: tuple,
        dynamo_guarded: bool = False,
        general: Callable | None = None,
    ) -> None:
        """``general``: a variant already compiled for ``specs`` when those are symbolic
        (one program for every size); inputs it does not fit get concrete variants."""
        self._build = build
        self._dynamo_guarded = dynamo_guarded
        self._lock = threading.Lock()
        self.variants: dict[tuple, Callable] = {}
        self._general: tuple[Callable, Callable] | None = None
        if general is not None:
            self.variants[specs] = general
            # (a Python check: symbolic sizes are not the runner's to check)
            self._general = (
                make_check(
                    specs,
                    getattr(general, "layout_free", frozenset()),
                    dynamo_guarded,
                    getattr(general, "kernel_read", None),
                    getattr(general, "requires", ()),
                ),
                general,
            )
            self._check, self._fn = self._general
            return
        self._fn = self._install(specs)

    def _check_for(self, specs: tuple, fn: Callable, dynamo_guarded: bool) -> Callable | None:
        """The check of ``fn``'s inputs; None where ``fn`` is a native runner's program,
        which checks them itself (no Python per input) and answers ``NotImplemented``."""
        how = (
            specs,
            getattr(fn, "layout_free", frozenset()),
            dynamo_guarded,
            getattr(fn, "kernel_read", None),
        )
        guard = getattr(fn, "guard", None)
        if guard is not None:
            entries = native_guard(*how)
            if entries is not None:
                guard(entries)
                return None
        return make_check(*how)

    def _install(self, specs: tuple) -> Callable:
        fn = self.variants.get(specs)
        if fn is None:
            fn = self._build(specs)
            self.variants[specs] = fn
        # Dynamo's guards hold a static graph's sizes, not a symbolic graph's: a concrete
        # variant of a symbolic graph checks its whole layout
        self._check = self._check_for(specs, fn, self._dynamo_guarded and self._general is None)
        return fn

    _boxed_call = True  # AOTAutograd may pass the inputs as one list

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        check = self._check
        if check is None:  # a native program: it checks its inputs itself
            out = self._fn(args)
            if out is not NotImplemented:
                return out
        elif check(args):
            return self._fn(args)
        with self._lock:
            general = self._general
            if general is not None and general[0](args):
                self._check, self._fn = general
            else:
                self._fn = self._install(tuple(spec_of(a) for a in args))
            fn = self._fn
        out = fn(args)
        if out is NotImplemented:  # (the variant was compiled for these inputs)
            raise RuntimeError(
                "sdk: a program compiled for these inputs refused them; please report this"
            )
        return out
