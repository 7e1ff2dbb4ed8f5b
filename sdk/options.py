"""Options: the types a compile's options are parsed into, and a plugin's options declared
as a dataclass of its own.

:class:`OptionSpec` declares one option of a plugin; a compile's options are parsed once into
:class:`CoreOptions` (the core's: ``ctx.core_options``) and a :class:`PluginOptions`
(the plugin's own: ``ctx.plugin_options``). All are importable from ``sdk`` and
``sdk.plugin`` too.

A plugin's options declared as a dataclass of its own (issue 48):

Instead of a mapping of :class:`~sdk.OptionSpec`, a plugin may give
:attr:`PluginInfo.options <sdk.PluginInfo.options>` a frozen dataclass: each field is an
option, its annotation the type a value must have and its default the option's default;
:func:`option` adds the doc (and the conformance suite's examples)::

    @dataclass(frozen=True)
    class CppOptions:
        extra_flags: tuple[str, ...] = sdk.option((), "compiler flags after the defaults")

    sdk.PluginInfo(name="cpu_cpp", ..., options=CppOptions)

The core checks each value against its field's type and rejects an unknown option with the
list of known ones, as for :class:`~sdk.OptionSpec`; in every hook ``ctx.plugin_options`` is
an instance of the plugin's class (``isinstance(ctx.plugin_options, CppOptions)``), with the
user's values. A type the check cannot test at run time (``Literal[...]``, a ``Callable``)
is an error naming the field, when ``PluginInfo`` is built.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import keyword
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, make_dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class OptionSpec:
    """One option a plugin accepts through ``torch.compile(options=...)``.

    ``examples``: other values the option may take, which the conformance suite compiles
    with (a ``bool`` option is tried flipped and an ``int`` one at ``default + 1`` without
    them; an option of another type is checked only with them).
    """

    default: Any
    doc: str
    type: type | tuple[type, ...] = object
    examples: tuple[Any, ...] = ()


class _Options:
    """What :class:`CoreOptions` and :class:`PluginOptions` share: the values as a dict, and
    a digest of them that is the same in every process (the whole-graph cache's key holds
    it; Python's ``hash()`` of a string changes from process to process)."""

    def as_dict(self) -> dict[str, Any]:
        """The options by name (a new dict: changing it changes nothing)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def hash(self) -> str:
        """A hex digest of the options' names and values (their ``repr``), as Triton's
        backends key their options."""
        text = repr(sorted(self.as_dict().items()))
        return hashlib.sha256(f"{type(self).__name__}|{text}".encode()).hexdigest()


@dataclass(frozen=True)
class CoreOptions(_Options):
    """The core's options of one compile, parsed once from ``mode=`` and ``options=`` and the
    SDK's environment variables: ``ctx.core_options``. Read them by attribute
    (``ctx.core_options.debug``); the core's option table (the vendor guide, "Options") says
    what each does. ``debug`` is already the ``debug`` option or ``SDK_DEBUG=1``, and ``cache``
    the ``cache`` option unless ``SDK_GRAPH_CACHE=0``: a plugin reads no variable for them."""

    fallback: bool = True
    fusion: bool = True
    debug: bool = False
    #: wrapper plugin names, or a :class:`Capability` for every wrapper that declares it
    wrappers: tuple[Any, ...] = ()
    chain: tuple[str, ...] = ()
    min_partition_size: int = 1
    autotune: bool = False
    cache: bool = True
    #: "native" (the SDK's C++ runner where it builds) or "python" (the step interpreter)
    runner: str = "native"
    channels_last: bool | None = None
    #: False: a fused kernel keeps bf16/fp16 values between its ops in float32
    round_intermediates: bool = True
    #: seconds each compiled graph variant may spend measuring the kernel choices its plugin
    #: offers (``sdk_kernel_choices``); None: automatic (a share of the graph's compile time,
    #: or a large budget with ``autotune``); 0: measure nothing
    tune_budget_s: float | None = None
    #: graph-level plugins: compile each partition in a worker process (``PluginInfo.
    #: isolate_compile``); None: as the plugin declares
    isolate_compile: bool | None = None
    #: ... and how long its worker may take before it is killed (None: no limit)
    isolate_timeout_s: float | None = 1800.0

    @property
    def strict(self) -> bool:
        """Strict mode: ``fallback`` off or ``debug`` on. What the core otherwise recovers
        from (a hook that raises, a partition that fails) raises instead."""
        return not self.fallback or self.debug


#: the names :class:`PluginOptions` keeps for itself: no plugin option may take them
RESERVED_OPTION_NAMES = frozenset({"as_dict", "hash", "plugin"})


@dataclass(frozen=True)
class PluginOptions(_Options):
    """A plugin's own options of one compile (those it declares in
    :attr:`PluginInfo.options`), parsed once: ``ctx.plugin_options``. A frozen dataclass of
    its own per plugin, with a field per declared option (``ctx.plugin_options.unroll``),
    at its default unless the user gave another value. Its :meth:`hash` is part of the
    whole-graph cache's key."""

    #: the plugin whose options these are
    plugin: ClassVar[str] = ""

    @staticmethod
    def of(plugin: str, values: Mapping[str, Any], declared: type | None = None) -> PluginOptions:
        """``values`` as ``plugin``'s options type (one class per plugin and option names);
        ``declared``: the plugin's own options dataclass (:mod:`sdk.options`), of which the
        result is an instance."""
        if declared is not None:
            return declared_type(plugin, declared)(**values)
        return _options_type(plugin, tuple(sorted(values)))(**values)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PluginOptions.of, (self.plugin, self.as_dict()))


@functools.lru_cache(maxsize=256)
def _options_type(plugin: str, names: tuple[str, ...]) -> type[PluginOptions]:
    bad = [
        n
        for n in names
        if not n.isidentifier() or keyword.iskeyword(n) or n in RESERVED_OPTION_NAMES
    ]
    if bad:
        raise ValueError(
            f"plugin {plugin!r} declares option(s) {bad}: an option's name must be a Python "
            f"identifier, not a keyword nor one of {sorted(RESERVED_OPTION_NAMES)}; rename "
            "them in its PluginInfo"
        )
    title = "".join(part.capitalize() for part in plugin.split("_")) or "Plugin"
    cls = make_dataclass(
        f"{title}Options",
        [(n, Any) for n in names],
        bases=(PluginOptions,),
        frozen=True,
        namespace={"plugin": plugin},
    )
    cls.__module__ = __name__
    return cls


def option(default: Any, doc: str = "", *, examples: tuple[Any, ...] = ()) -> Any:
    """A field of an options dataclass: its default, what it does (``doc``: the error that
    lists the known options shows it) and other values the conformance suite compiles with
    (``examples``, as :attr:`OptionSpec.examples`)."""
    return dataclasses.field(default=default, metadata={"doc": doc, "examples": tuple(examples)})


def specs_of(cls: type) -> dict[str, OptionSpec]:
    """The :class:`~sdk.OptionSpec` of each field of the options dataclass ``cls``: its
    default, doc, run-time type and examples. A class that is not a frozen dataclass, a field
    without a default, a type that cannot be checked at run time or a default not of its
    type is a ``ValueError`` naming the field and the fix."""
    name = getattr(cls, "__name__", repr(cls))
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ValueError(f"plugin options {name} must be a dataclass (or a dict of OptionSpec)")
    if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise ValueError(f"plugin options {name} must be declared @dataclass(frozen=True)")
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # noqa: BLE001 - an annotation that names nothing importable
        raise ValueError(f"plugin options {name}: its annotations do not resolve ({exc})") from None
    out: dict[str, OptionSpec] = {}
    for f in dataclasses.fields(cls):
        where = f"option {f.name!r} of {name}"
        if f.name in RESERVED_OPTION_NAMES:
            raise ValueError(f"{where}: the name is reserved ({sorted(RESERVED_OPTION_NAMES)})")
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where} has no default: give it one (sdk.option(default, doc))")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind = runtime_type(hints[f.name], where)
        if not isinstance(default, kind):
            raise ValueError(
                f"{where} defaults to {default!r}, a {type(default).__name__}, not "
                f"{type_name(kind)} as annotated"
            )
        out[f.name] = OptionSpec(
            default,
            f.metadata.get("doc", ""),
            kind,
            tuple(f.metadata.get("examples", ())),
        )
    return out


def runtime_type(hint: Any, where: str) -> type | tuple[type, ...]:
    """What ``isinstance`` checks a value of annotation ``hint`` against: the class, the
    origin of a generic (``tuple[str, ...]``: ``tuple``; its items are not checked), each
    member of a union (``float | None``), ``object`` for ``Any``."""
    if hint is Any:
        return object
    if hint is None or hint is type(None):
        return type(None)
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        out: list[type] = []
        for arg in typing.get_args(hint):
            got = runtime_type(arg, where)
            out.extend(got if isinstance(got, tuple) else (got,))
        return tuple(dict.fromkeys(out))
    if isinstance(origin, type):
        return origin
    if isinstance(hint, type):
        return hint
    raise ValueError(
        f"{where} is annotated {hint!r}, which cannot be checked at run time: use a class, a "
        "generic of one (tuple[str, ...]), a union of them or Any"
    )


def type_name(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return " or ".join(x.__name__ for x in t)
    return t.__name__


@functools.lru_cache(maxsize=256)
def declared_type(plugin: str, cls: type) -> type[PluginOptions]:
    """``ctx.plugin_options``'s type for a plugin that declared ``cls``: a subclass of both
    (the plugin's fields and methods; :class:`~sdk.PluginOptions`'s ``as_dict`` and
    ``hash``), so the plugin gets an instance of its own class."""

    def __reduce__(self: PluginOptions) -> tuple[Any, ...]:
        return (PluginOptions.of, (plugin, self.as_dict(), cls))

    made = dataclasses.make_dataclass(
        cls.__name__,
        [],
        bases=(cls, PluginOptions),
        frozen=True,
        namespace={"plugin": plugin, "__reduce__": __reduce__, "__doc__": cls.__doc__},
    )
    made.__module__ = cls.__module__
    made.__qualname__ = f"{cls.__qualname__}[{plugin}]"
    return made
