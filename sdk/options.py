"""A plugin's options declared as a dataclass of its own (issue 48).

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
import types
import typing
from typing import Any

from sdk.plugin import RESERVED_OPTION_NAMES, OptionSpec, PluginOptions


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
