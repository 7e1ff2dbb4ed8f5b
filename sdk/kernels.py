"""The kernel records a codegen plugin exchanges with the core.

:class:`KernelSource` is what ``sdk_render_kernel`` renders and ``sdk_compile_kernels``
compiles, into :data:`KernelFn` callables (a :class:`NativeEntry` on one lets the native runner
launch it without Python); :class:`KernelChoices` of :class:`KernelVariant` s is what
``sdk_kernel_choices`` offers the core to measure. All are importable from ``sdk`` and
``sdk.plugin`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class KernelSource:
    """A rendered kernel: what ``sdk_render_kernel`` returns.

    ``entry`` is the symbol the compiled artifact exposes; ``meta`` carries
    whatever the plugin's own compile step needs (launch grid, argument kinds).

    ``requires`` (a kernel of symbolic sizes): the sizes the source is right for, each
    ``(expression, limit)`` an expression over the kernel's size arguments in Python syntax
    (``"768*s0*s1 + 4096"``) whose value must not exceed ``limit``; a kernel that computes
    its indices in 32 bits states their bounds so. The program checks them at each call,
    and a call whose sizes break one runs a variant compiled for its concrete sizes.
    """

    name: str
    language: str  # "c++", "triton", ...
    source: str
    entry: str
    meta: dict[str, Any] = field(default_factory=dict)
    requires: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class KernelVariant:
    """One other way to run a kernel: an entry of :attr:`KernelChoices.alternatives`.

    ``source`` is the kernel rendered with this choice (another launch configuration in its
    ``meta``, another block size in its text): it takes the same buffers and size arguments
    as the rendered kernel and computes the same values. ``label`` is what ``sdk.explain``
    shows for it (``"XBLOCK=64 num_warps=4"``); one line, unique among the kernel's choices.
    """

    label: str
    source: KernelSource

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label or "\n" in self.label:
            raise ValueError(f"KernelVariant label must be one non-empty line, got {self.label!r}")
        if not isinstance(self.source, KernelSource):
            raise TypeError(
                f"KernelVariant {self.label}: source must be an sdk.KernelSource, got a "
                f"{type(self.source).__name__}"
            )


@dataclass(frozen=True)
class KernelChoices:
    """What ``sdk_kernel_choices`` answers for one kernel (hook API 6): other ways to run it,
    for the core to time against the one ``sdk_render_kernel`` rendered.

    ``alternatives``: a few :class:`KernelVariant` s (the rendered kernel is not among them:
    the core times it too, labelled ``default``). ``synchronize``: a function that returns
    once every kernel launched so far has finished (the device's queue drained, e.g. the
    device runtime's ``synchronize``), with which the core's wall-clock timer measures device
    time; None where a kernel's call returns when its work is done (a CPU). ``default``: the
    rendered kernel's label in ``sdk.explain``.
    """

    alternatives: tuple[KernelVariant, ...]
    synchronize: Callable[[], Any] | None = None
    default: str = "default"

    def __post_init__(self) -> None:
        alts = tuple(self.alternatives)
        object.__setattr__(self, "alternatives", alts)
        for a in alts:
            if not isinstance(a, KernelVariant):
                raise TypeError(
                    f"KernelChoices.alternatives holds a {type(a).__name__}; give "
                    "sdk.KernelVariant(label, source) entries"
                )
        labels = [self.default, *(a.label for a in alts)]
        if len(set(labels)) != len(labels):
            raise ValueError(f"KernelChoices labels must be unique, got {labels}")
        if self.synchronize is not None and not callable(self.synchronize):
            raise TypeError(
                f"KernelChoices.synchronize must be callable or None, got a "
                f"{type(self.synchronize).__name__}"
            )


#: A compiled kernel, one per source of ``sdk_compile_kernels``: called as
#: ``fn(*buffers, *sizes)``, the kernel's tensors in the order of ``Kernel.args``, then one
#: Python int per symbol of ``Kernel.size_args`` (the run's symbolic sizes, each >= 2; none
#: for static sizes); writes its output buffers and returns nothing. It raises
#: ``IndexError`` (naming the kernel) for an input out of range, as eager raises for it;
#: what the core does with an exception at run time is in :mod:`sdk.hookspecs`.
KernelFn = Callable[..., None]


@dataclass(frozen=True)
class NativeEntry:
    """A kernel's C entry point, for the native runner (``core/runner.cpp``): a compiled
    :data:`KernelFn` that carries one as its attribute ``native`` is launched by the runner
    without Python (one Python->C++ crossing per graph call, not per kernel); one without
    it makes its graph's program run in Python. ``sdk.toolchain.launcher`` sets it.

    Two calling conventions:

    * ``state == 0``: the function at ``address`` takes ``nargs`` pointers (each tensor's
      ``data_ptr()``, in ``Kernel.args`` order), then ``nsizes`` ``int64_t`` sizes, and
      returns nothing; with ``error``, it returns an ``int64_t``, nonzero when it failed.
    * ``state != 0`` (a device kernel): ``int64_t f(void* state, void* stream, const
      intptr_t* args, int64_t n)``: ``state`` is yours (the kernel's handle, grid, ...; keep
      it alive as long as the launcher), ``stream`` the native handle of the current stream
      of the first tensor's device (NULL on the CPU), ``args`` the pointers then the sizes;
      nonzero when it failed.

    A state-convention function may return ``NativeEntry.NOT_NATIVE`` (-2) when it cannot
    launch now (not loaded yet, another context current): the runner then calls the
    :data:`KernelFn` itself, with the GIL, as the step interpreter does.

    When it failed, the runner raises ``error()`` (an exception instance, built with the
    GIL held), or a ``RuntimeError`` with the status without ``error``. The function must be
    safe to call without the GIL, and stay loaded while the process runs.
    """

    address: int
    nargs: int
    nsizes: int = 0
    error: Callable[[], BaseException] | None = None
    state: int = 0

    NOT_NATIVE: ClassVar[int] = -2
