"""The program ISA: every opcode of a compiled graph's program (core/steps.py), declared once.

A program is a list of steps over numbered slots (tensors) and numbered registers (int64: the
sizes of a graph compiled for symbolic sizes, read from its inputs and computed by EXPR); each
step is a tuple, its opcode first, then its fields in the order :data:`OPCODES` gives them.
A size, stride or offset field holds an *operand*: an int literal, or a register as a
one-item tuple ``(r,)`` (a tuple, not a negative int: strides and offsets may be negative). Everything else is derived
from this table:

* ``core/steps.py``: the constants the writer uses (``INPUT``, ``CONST``, ..., ``NAMES``,
  ``MAX_LAUNCH_ARGS``), the Python verifier :func:`~core.steps.check` and
  :func:`~core.steps.describe_step`, each driven by the fields' kinds;
* ``core/native.py``: the C++ header of the native runner (``core/runner.cpp``): the opcode
  and argument enums, :data:`VERSION`, :data:`MAX_LAUNCH_ARGS`, each opcode's field layout
  (kinds and positions), which the runner's decoder and its verifier read.

The header is generated into the runner's source at build time (``native.source()`` splices
it in where ``runner.cpp`` says ``@ISA@``), not checked in: the runner is built from one
source text whose content hash keys its build cache, so a runner built from another table
cannot be loaded by mistake, and there is no second copy that could fall out of date (no
test needed to catch a stale one). ``python -m sdk.core.native --isa`` prints it.

The steps are a program's only form (the wrapper emits nothing else). Two forms of a step:
the runner's (``fields``), which ``runner.cpp`` decodes and both verifiers check, and the
wrapper's (``written``, where it differs), which the wrapper writes, the whole-graph cache
keeps and the step interpreter (core/interp.py) runs: kernels as their functions, ops as
``OpOverload``, constants by name. ``Wrapper._native`` turns one into the other.

Change an opcode here (and its decoding and execution in ``runner.cpp``), then bump
:data:`VERSION`: a program written for another version is refused at load.
"""

from __future__ import annotations

from typing import NamedTuple

#: the version of this table; the runner refuses a program written for another
VERSION = 2
#: the most pointer and size arguments one LAUNCH may take (the runner's call_c has one
#: direct call per arity up to this)
MAX_LAUNCH_ARGS = 96

# ---- field kinds: what a field holds, and what both verifiers check of it ----
SLOT_WRITE = "slot write"  # a slot in range; written from this step on
SLOT_READ = "slot read"  # a slot in range that an earlier step wrote
SLOT_FREE = "slot free"  # a slot read, then no longer written
SLOT_OUTS = "slot outs"  # a list: slots written, or -1 (an output not kept)
SLOTS_READ = "slot list read"  # a list of slots read
OPTIONAL_SLOTS_READ = "optional slot list read"  # a list of slots read, or -1 (None)
INDEX = "index"  # an int in [0, 2**31): a graph input's position
POSITIONS = "positions"  # a list of indexes: graph inputs' positions
REG_WRITE = "register write"  # a register in range; written from this step on
REG_READ = "register read"  # a register in range that an earlier step wrote
SIZES = "sizes"  # a list of operands: int64 >= 0, or (r,) a register read
STRIDES = "strides"  # a list of operands: int64, or (r,); as many as the step's sizes
OFFSET = "offset"  # an operand: an int64, or (r,) a register read
DIMS = "dims"  # a list of ints, each an index into the step's strides
INT = "int"  # an int64
BOOL = "bool"
DTYPE = "dtype"  # a torch.dtype
DEVICE = "device"  # a device's name, as torch.device parses it
TENSOR = "tensor"  # a tensor (a constant of the graph)
ADDRESS = "address"  # a C function's address: an int in (0, 2**64)
STATE = "state"  # a pointer the function takes, or 0: an int in [0, 2**64)
NAME = "name"  # a str
FUNCTION = "function"  # a Python callable
ERROR = "error"  # a callable that makes the exception to raise, or None
VALUE = "value"  # any Python object (converted by the op's schema, or returned as is)
NUMBER = "number"  # a Python int, float or bool
ARGS = "args"  # CALL's arguments: a list of tuples, each tagged by ARG_KINDS
ITEMS = "items"  # RETURN's items: a list of tuples, each tagged by ITEM_KINDS
TERMS = "terms"  # EXPR's postfix terms: a list of tuples, each tagged by TERM_KINDS
SPECS = "specs"  # CALL_PY's outputs as checked: a list of tuples, each tagged by SPEC_KINDS
NAMES = "names"  # a list of str
# the wrapper's form only (Wrapper._native turns them into the runner's)
OP = "op"  # an ATen OpOverload (the runner's form: its schema name and overload name)
CONST_NAME = "constant name"  # a graph constant's name (the runner's form: the tensor)
KERNEL = "kernel"  # a compiled kernel's function (the runner's form: its C entry point)
VENDOR = "vendor function"  # a plugin's function's name in the wrapper's ``named`` and
#: ``vendor`` (the runner's form: the function)

#: every kind, in the order of the C++ enum (``isa::Kind``)
KINDS = (
    SLOT_WRITE,
    SLOT_READ,
    SLOT_FREE,
    SLOT_OUTS,
    SLOTS_READ,
    OPTIONAL_SLOTS_READ,
    INDEX,
    POSITIONS,
    REG_WRITE,
    REG_READ,
    SIZES,
    STRIDES,
    OFFSET,
    DIMS,
    INT,
    BOOL,
    DTYPE,
    DEVICE,
    TENSOR,
    ADDRESS,
    STATE,
    NAME,
    FUNCTION,
    ERROR,
    VALUE,
    NUMBER,
    ARGS,
    ITEMS,
    TERMS,
    SPECS,
    NAMES,
    OP,
    CONST_NAME,
    KERNEL,
    VENDOR,
)


class Field(NamedTuple):
    name: str
    kind: str


class Opcode(NamedTuple):
    number: int
    name: str  # the constant's name (steps.INPUT)
    text: str  # how sdk.explain's program names it
    fields: tuple[Field, ...]  # the runner's form, after the opcode
    doc: str  # what the runner does
    #: the wrapper's form, where it differs from the runner's
    written: tuple[Field, ...] | None = None
    #: how sdk.explain prints a step of the wrapper's form: its fields by name
    show: str = ""
    #: fields whose lengths together are at most MAX_LAUNCH_ARGS
    capped: tuple[str, ...] = ()


class Variant(NamedTuple):
    """One tagged tuple of an ARGS or ITEMS list: ``(tag, fields...)``."""

    tag: int
    name: str
    fields: tuple[Field, ...]
    doc: str
    #: a term of EXPR: how many values it pops off the stack (it pushes one)
    pops: int = 0


F = Field
_DST, _SRC = F("dst", SLOT_WRITE), F("src", SLOT_READ)
_LAYOUT = (F("sizes", SIZES), F("strides", STRIDES))

OPCODES: tuple[Opcode, ...] = (
    Opcode(
        0,
        "INPUT",
        "input",
        (_DST, F("index", INDEX)),
        doc="slots[dst] = the graph's input at index",
        show="{dst} = input {index}",
    ),
    Opcode(
        1,
        "CONST",
        "const",
        (_DST, F("tensor", TENSOR)),
        doc="slots[dst] = a constant tensor of the graph (a host constant's device copy is "
        "made once, when the program is loaded)",
        written=(_DST, F("name", CONST_NAME), F("on_device", BOOL)),
        show="{dst} = constant {name}, device copy {on_device}",
    ),
    Opcode(
        2,
        "ALIAS",
        "alias",
        (_DST, _SRC),
        doc="slots[dst] = slots[src], the same tensor",
        show="{dst} = alias {src}",
    ),
    Opcode(
        3,
        "EMPTY",
        "empty",
        (_DST, *_LAYOUT, F("dtype", DTYPE), F("device", DEVICE)),
        doc="slots[dst] = a new tensor of that layout, dtype and device",
        show="{dst} = empty {sizes}, {strides}, {dtype}, {device}",
    ),
    Opcode(
        4,
        "VIEW",
        "view",
        (_DST, _SRC, *_LAYOUT, F("offset", OFFSET)),
        doc="slots[dst] = src's storage reinterpreted, offset relative to src's (no view record)",
        show="{dst} = view {src}, {sizes}, {strides}, {offset}",
    ),
    Opcode(
        5,
        "AS_STRIDED",
        "as_strided",
        (_DST, _SRC, *_LAYOUT, F("offset", OFFSET), F("relative", BOOL)),
        doc="slots[dst] = torch.as_strided(src, ...), a real view; offset relative to src's "
        "where relative",
        show="{dst} = as_strided {src}, {sizes}, {strides}, {offset}, {relative}",
    ),
    Opcode(
        6,
        "LAUNCH",
        "launch",
        (
            F("address", ADDRESS),
            F("slots", SLOTS_READ),
            F("sizes", SIZES),
            F("checked", BOOL),
            F("error", ERROR),
            F("state", STATE),
            F("function", FUNCTION),
        ),
        doc="a kernel's C function (sdk.NativeEntry): state 0: f(pointers..., sizes...) (its "
        "size arguments as int64), its "
        "int result nonzero on failure where checked; else f(state, stream, args, nargs), "
        "which returns -2 (NOT_NATIVE) to have function launched by Python; a failure "
        "raises error() (a RuntimeError without it)",
        written=(
            F("function", KERNEL),
            F("slots", SLOTS_READ),
            F("sizes", SIZES),
            F("kernel", NAME),
        ),
        show="launch {kernel}({slots})",
        capped=("slots", "sizes"),
    ),
    Opcode(
        7,
        "CALL",
        "call",
        (
            F("name", NAME),
            F("overload", NAME),
            F("args", ARGS),
            F("outs", SLOT_OUTS),
            F("multi", BOOL),
        ),
        doc="an ATen op through the dispatcher, one argument per schema argument; its results "
        "into outs (multi: the op returns a list)",
        written=(F("op", OP), F("args", ARGS), F("outs", SLOT_OUTS), F("multi", BOOL)),
        show="{outs} = {op}({args})",
    ),
    Opcode(
        8,
        "RESTRIDE",
        "restride",
        (F("slot", SLOT_READ), F("dims", DIMS), F("strides", STRIDES)),
        doc="slots[slot] copied into these strides where one of its dims has others",
        show="restride {slot}, {dims}, {strides}",
    ),
    Opcode(
        9, "FREE", "free", (F("slot", SLOT_FREE),), doc="slots[slot] dropped", show="free {slot}"
    ),
    Opcode(
        10,
        "WRITES",
        "writes",
        (F("positions", POSITIONS),),
        doc="these graph inputs are written in place by now (named if a later step raises)",
        show="writes {positions}",
    ),
    Opcode(
        11,
        "RETURN",
        "return",
        (F("items", ITEMS),),
        doc="the graph's outputs; the last step, and the only return",
        show="return {items}",
    ),
    Opcode(
        12,
        "LAUNCH_PY",
        "launch (Python)",
        (F("function", FUNCTION), F("slots", SLOTS_READ), F("sizes", SIZES)),
        doc="the runner's form of a LAUNCH whose kernel has no C entry point: "
        "function(tensors..., sizes...), the GIL taken",
        show="launch (Python) {function}({slots})",
    ),
    Opcode(
        13,
        "INPUT_SIZE",
        "input size",
        (F("reg", REG_WRITE), F("index", INDEX), F("which", INDEX), F("dim", INDEX)),
        doc="regs[reg] = the tensor graph input at index's size(dim) (which 0), stride(dim) "
        "(which 1) or storage offset (which 2: dim unused)",
        show="{reg} = input {index} {which}[{dim}]",
    ),
    Opcode(
        14,
        "INPUT_INT",
        "input int",
        (F("reg", REG_WRITE), F("index", INDEX)),
        doc="regs[reg] = the graph input at index, an int (a symbolic size Dynamo passes)",
        show="{reg} = input {index}",
    ),
    Opcode(
        15,
        "EXPR",
        "expr",
        (F("reg", REG_WRITE), F("terms", TERMS)),
        doc="regs[reg] = the postfix expression's value over int64 literals and registers "
        "(TERM_KINDS: the arithmetic of sympy size expressions, floor division and modulo "
        "as Python's; a division by zero raises)",
        show="{reg} = {terms}",
    ),
    Opcode(
        16,
        "CALL_PY",
        "call (Python)",
        (
            F("function", FUNCTION),
            F("args", ARGS),
            F("names", NAMES),
            F("outs", SLOT_OUTS),
            F("multi", BOOL),
            F("specs", SPECS),
            F("who", NAME),
            F("check", FUNCTION),
        ),
        doc="a plugin's own library function (sdk_extern), the GIL taken: function(args...), "
        "the last len(names) arguments by those keywords; its result checked by "
        "check(result, specs, multi, who) (the wrapper's _vendor_result: each tensor's "
        "shape, dtype and device, put in the spec's strides), the checked values into outs",
        written=(
            F("function", VENDOR),
            F("args", ARGS),
            F("names", NAMES),
            F("outs", SLOT_OUTS),
            F("multi", BOOL),
            F("specs", SPECS),
            F("who", NAME),
        ),
        show="{outs} = {function}({args}) (Python)",
    ),
)

#: CALL's arguments, one per schema argument in order
ARG_KINDS: tuple[Variant, ...] = (
    Variant(0, "SLOT", (F("slot", SLOT_READ),), "a slot's tensor"),
    Variant(1, "VALUE", (F("value", VALUE),), "a constant, converted once by the schema's type"),
    Variant(2, "TENSORS", (F("slots", SLOTS_READ),), "a Tensor[] of slots"),
    Variant(3, "OPTIONAL_TENSORS", (F("slots", OPTIONAL_SLOTS_READ),), "a Tensor?[] (-1: None)"),
    Variant(4, "DEFAULT", (), "the schema's default"),
    Variant(
        5,
        "NUMBER",
        (F("value", NUMBER),),
        "a Python number where the schema takes a Tensor (a wrapped number)",
    ),
    Variant(
        6,
        "REG",
        (F("reg", REG_READ),),
        "a register's value: an int (a SymInt), a wrapped number where the schema takes a Tensor",
    ),
    Variant(7, "INTS", (F("values", STRIDES),), "a list of operands: an int[] (a SymInt[])"),
)

#: RETURN's items, one per graph output
ITEM_KINDS: tuple[Variant, ...] = (
    Variant(0, "SLOT", (F("slot", SLOT_READ),), "a slot's tensor (None where it is undefined)"),
    Variant(1, "VALUE", (F("value", VALUE),), "a Python object, returned as is"),
    Variant(2, "REG", (F("reg", REG_READ),), "a register's value, as an int (a symbolic size)"),
)

#: EXPR's terms, in postfix order: each pushes one value, after popping ``pops``
TERM_KINDS: tuple[Variant, ...] = (
    Variant(0, "LIT", (F("value", INT),), "an int64 literal"),
    Variant(1, "REG", (F("reg", REG_READ),), "a register's value"),
    Variant(2, "ADD", (), "a + b", pops=2),
    Variant(3, "MUL", (), "a * b", pops=2),
    Variant(4, "FLOORDIV", (), "a // b (Python's: rounded towards -inf)", pops=2),
    Variant(5, "MOD", (), "a % b (Python's: the sign of b)", pops=2),
    Variant(6, "NEG", (), "-a", pops=1),
)

#: CALL_PY's outputs, one per output of the op
SPEC_KINDS: tuple[Variant, ...] = (
    Variant(0, "ANY", (), "not a tensor the graph reads (returned as is)"),
    Variant(
        1,
        "TENSOR",
        (F("sizes", SIZES), F("strides", STRIDES), F("dtype", DTYPE), F("device", DEVICE)),
        "a tensor of these sizes, dtype and device type, put in these strides",
    ),
)

#: the tagged lists: a field of this kind holds tuples of these variants
VARIANTS = {ARGS: ARG_KINDS, ITEMS: ITEM_KINDS, TERMS: TERM_KINDS, SPECS: SPEC_KINDS}
