"""What a plugin declares it can take, and what it prefers the core to make.

:class:`Capability` members go in :attr:`PluginInfo.capabilities <sdk.PluginInfo>`: the
core asks them, never the device name. :class:`Preferences`, the answer of
``sdk_preferences`` (hook API 6), changes only the speed of what the core makes. The members
hook API 6 retired remain names of :class:`Capability`, as :class:`RetiredCapability` values,
for plugins of hook API 5 or earlier (:func:`retired_fix` says what such a plugin does
instead). All are importable from ``sdk`` and ``sdk.plugin`` too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any


class _CapabilityType(enum.EnumMeta):
    """:class:`Capability`'s metaclass: a member retired in hook API 6 is still a name of the
    class (``Capability.FP64``), a :class:`RetiredCapability`, so that a plugin written for hook
    API 5 or earlier still imports and loads (the registry translates it, with one warning)."""

    def __getattr__(cls, name: str) -> Any:
        if not name.startswith("_") and name in _RETIRED:
            return _RETIRED[name]
        raise AttributeError(name)


class Capability(str, enum.Enum, metaclass=_CapabilityType):
    """Abilities a plugin declares in :attr:`PluginInfo.capabilities`: what its renderer (or
    wrapper) can take. The core asks these, never the device name, and does not make what a
    plugin did not declare.

    Each member's docstring (``Capability.REDUCTIONS.__doc__``) says what declaring it makes
    the core do. The value (``"reductions"``) is what ``Capability("reductions")`` accepts.

    Hook API 6 kept only these, the enforced ones. What a plugin *prefers* (the core's output
    is correct either way, only its speed differs) is :class:`Preferences`, the answer of the
    hook ``sdk_preferences``. The members that changed nothing (``FP64``, ``BF16``,
    ``INDIRECT_LOADS``, ``RANDOM``: the core hands a plugin such kernels either way, and a
    plugin that cannot render them refuses those ops in ``sdk_op_support``) are gone. Both
    kinds remain *names* of the class (``Capability.CHANNELS_LAST``), as
    :class:`RetiredCapability` values, so that a plugin of hook API 5 or earlier imports and
    behaves as before: the core reads a retired preference it declares as that preference,
    and warns once (:class:`sdk.SDKDeprecationWarning`) with the fix. A plugin of hook API 6
    that declares one is unavailable, with the reason.
    """

    def __new__(cls, value: str, doc: str) -> Capability:
        member = str.__new__(cls, value)
        member._value_ = value
        member.__doc__ = doc
        return member

    REDUCTIONS = (
        "reductions",
        "The renderer fuses reduction stages (``sdk.ir.Reduction``) with other work: the "
        "scheduler fuses a reduction with its producers and readers. Without it every "
        "reduction is a kernel of its own (still rendered by the plugin: refuse reductions "
        "in ``sdk_op_support`` to send them to ATen), and the conformance suite skips its "
        "reduction fusion check.",
    )
    MULTI_STAGE = (
        "multi_stage",
        "A kernel may hold several reduction stages per outer point, run in order (a "
        "softmax's max, then sum, then store, in one kernel). Without it the scheduler "
        "makes no fusion that needs more than one stage (a softmax is several kernels).",
    )
    STORE_THEN_LOAD = (
        "store_then_load",
        "A later stage of a kernel may load, at the same outer point, what an earlier "
        "stage stored there (one thread runs a row's stages in order: true in C++, not "
        "in Triton). The core then stores an expensive value once and loads it back in "
        "the later stage (a softmax's exp(x - max): one exp per element instead of two). "
        "Without it a later stage recomputes the value.",
    )
    SYMBOLIC_SIZES = (
        "symbolic_sizes",
        "Kernels may have symbolic sizes (``sdk.ir.size_var``): the renderer takes each of "
        "a kernel's ``size_args`` as an integer argument after the buffers, so one "
        "compiled program serves every size of a dynamic dimension. Without it the core "
        "compiles a variant per concrete shape.",
    )
    GRAPH_CAPTURE = (
        "graph_capture",
        "For wrapper plugins: the wrapper replays whole graphs (CUDA graphs). "
        '``mode="reduce-overhead"`` (and ``"max-autotune"``) applies every available '
        "wrapper that declares it.",
    )


class RetiredCapability(str):
    """A member of :class:`Capability` that hook API 6 retired (``Capability.FP64``,
    ``Capability.CHANNELS_LAST``): equal to its old value (``"fp64"``), accepted in
    :attr:`PluginInfo.capabilities` from plugins of hook API 5 or earlier only. ``preference``
    is the :class:`Preferences` field it became, or ``""`` for a member that changed nothing."""

    name: str
    preference: str

    def __new__(cls, name: str, value: str, preference: str = "") -> RetiredCapability:
        self = str.__new__(cls, value)
        self.name, self.preference = name, preference
        return self

    def __repr__(self) -> str:
        return f"Capability.{self.name} (retired in hook API 6)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (getattr, (Capability, self.name))

    @property
    def value(self) -> str:
        return str(self)


#: the members hook API 6 retired, by name: the preferences with their field of
#: :class:`Preferences`, then those that changed nothing
_RETIRED: dict[str, RetiredCapability] = {
    r.name: r
    for r in (
        RetiredCapability("CHANNELS_LAST", "channels_last", "channels_last"),
        RetiredCapability("CONV_BIAS_IN_KERNEL", "conv_bias_in_kernel", "conv_bias_in_kernel"),
        RetiredCapability("MM_BIAS_IN_KERNEL", "mm_bias_in_kernel", "mm_bias_in_kernel"),
        RetiredCapability(
            "CHEAP_TRANSCENDENTALS", "cheap_transcendentals", "cheap_transcendentals"
        ),
        RetiredCapability("FP64", "fp64"),
        RetiredCapability("BF16", "bf16"),
        RetiredCapability("INDIRECT_LOADS", "indirect_loads"),
        RetiredCapability("RANDOM", "random"),
    )
}
_RETIRED_BY_VALUE = {str(r): r for r in _RETIRED.values()}


@dataclass(frozen=True)
class Preferences:
    """What a plugin prefers the core to make: the answer of ``sdk_preferences`` (hook API 6).

    The core's output computes the same with any of these; only its speed on the device
    differs (and, for ``ordered_index_add``, which library call gives the same bits in
    every run). Every field defaults to ``False``, the core's choice for a plugin that does not
    answer (a CPU's). The core reads them as ``ctx.preferences`` (a plugin may too).
    """

    #: the device's library convolutions are faster on channels-last activations: the core
    #: picks that layout once per graph (inference graphs with convolutions, by Inductor's
    #: FLOP-weighted rule) and converts only at the graph's edges. The option
    #: ``channels_last`` overrides it either way
    channels_last: bool = False
    #: with ``channels_last``: training graphs too (the forward and, saved so, the backward),
    #: BatchNorm's batch statistics included. Those are then column reductions over
    #: channels-last activations (per channel, over N·H·W rows); the plugin says its
    #: reductions make them about as fast as over the trace's layout (cuda_triton splits
    #: them into two kernels by the grid's size). Without it a training graph keeps the
    #: trace's layout unless the option ``channels_last=True`` asks
    channels_last_training: bool = False
    #: a convolution's bias is added in the generated kernel that follows the library call
    #: (with BatchNorm, activation and residual), not by the library call itself: the core's
    #: graph pass ``conv_bias_into_kernel`` runs for the plugin
    conv_bias_in_kernel: bool = False
    #: a matrix product with a bias (``addmm``) whose result only pointwise ops read becomes a
    #: product without the bias (``mm``), the bias added in the generated kernel of those ops
    #: (Inductor's rule on GPUs: the library then picks its product kernel without a bias
    #: epilogue); a product the plugin's ``sdk_extern`` takes stays whole. The core's graph
    #: pass ``mm_bias_into_kernel`` does it
    mm_bias_in_kernel: bool = False
    #: transcendental functions (``sdk.ir.TRANSCENDENTAL``: sin, exp, erf, ...) cost about as
    #: much as a load (a GPU's special-function units): the core may recompute a value that
    #: uses them at every point of a larger reader that broadcasts it. Without it that value
    #: is stored once (the rotary embedding's cos/sin, read over every head)
    cheap_transcendentals: bool = False
    #: ATen's ``index_add`` adds each row's values in index order on the plugin's device (the
    #: CPU's does; CUDA's adds with atomics), while its accumulating ``index_put`` does not
    #: (the CPU's splits the indices over threads: another order, other bits, in each run).
    #: The core then accumulates into a table (an embedding's gradient) through
    #: ``index_add``, not ``index_put``, so that every run gives the same bits. Leave it
    #: False where ``index_put`` is the reproducible one (CUDA: a sort, then each row in
    #: order)
    ordered_index_add: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, bool):
                raise TypeError(f"Preferences.{f.name} is {value!r}; it must be True or False")

    @staticmethod
    def of_retired(capabilities: frozenset[Any]) -> Preferences:
        """The preferences a plugin of hook API 5 or earlier declared as capabilities."""
        return Preferences(
            **{
                c.preference: True
                for c in capabilities
                if isinstance(c, RetiredCapability) and c.preference
            }
        )


def retired_fix(retired: Any, *, upgrade: bool = True) -> str:
    """What a plugin declaring the retired capabilities ``retired`` does instead."""
    prefs = sorted(r.preference for r in retired if r.preference)
    dead = sorted(f"Capability.{r.name}" for r in retired if not r.preference)
    parts = []
    if prefs:
        args = ", ".join(f"{p}=True" for p in prefs)
        parts.append(
            f"return sdk.Preferences({args}) from an sdk_preferences hook instead "
            "(a preference: the core's output is correct either way)"
        )
    if dead:
        parts.append(
            f"drop {', '.join(dead)} (the core never read it: refuse the ops you cannot "
            "render in sdk_op_support)"
        )
    if upgrade:
        parts.append('then declare hook_api=6 (docs/vendor-guide.md, "Versioning")')
    return "; ".join(parts)
