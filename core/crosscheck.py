"""``options={"runner": "check"}``: every call of a compiled program runs through both of its
executors, the native runner (core/runner.cpp) and the step interpreter (core/interp.py),
and their results must be equal bit for bit (a debugging mode, about twice a call's cost).

The interpreter runs first, on a copy of the inputs (each input storage copied whole, so
sizes, strides, storage offsets, alignment and the aliasing between inputs are the
caller's), from the device generator's state at the call; the runner then runs on the
caller's inputs from that same state. Compared: the outputs (dtype, sizes, strides and
bits; a meta tensor's layout only), every input storage's bytes afterwards (what each
wrote in place), the generator's state after the call, and, where one raises, that the
other raises the same (type and message).
A difference raises :class:`RunnerMismatch` naming it; else the runner's results return.

A program the runner cannot run (no steps yet: symbolic sizes, collectives; or refused)
runs through its one executor, and ``sdk.explain`` says "not checked" and why
(:func:`why_not`): never a silent pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class RunnerMismatch(AssertionError):
    """The native runner and the step interpreter disagree on a program's call."""


def cross_checked(native: Callable, interpreted: Callable, device: torch.device, name: str):
    """``call(args)`` running ``interpreted`` and then ``native``, compared (module doc)."""
    get_state, set_state = _generator(device)

    def call(args: Any) -> Any:
        copies, storages = _copies(args)
        state = get_state()
        try:
            want, failed = interpreted(copies), None
        except Exception as exc:  # noqa: BLE001 - compared with the runner's below
            want, failed = None, exc
        after = get_state()
        set_state(state)
        try:
            got = native(args)
        except Exception as exc:
            if failed is None or _error(exc) != _error(failed):
                raise RunnerMismatch(
                    f"sdk runner check, graph {name}: the native runner raised "
                    f"{_error(exc)}; the interpreter "
                    + (f"raised {_error(failed)}" if failed else "did not")
                ) from exc
            raise
        if failed is not None:
            raise RunnerMismatch(
                f"sdk runner check, graph {name}: the interpreter raised "
                f"{_error(failed)}; the native runner did not"
            ) from failed
        if got is NotImplemented:  # (the runner's own guard: never set in this mode)
            return got
        _compare(name, "output", want, got)
        for k, (whole, copy) in enumerate(storages):
            if not whole.is_meta and not torch.equal(whole, copy):
                raise RunnerMismatch(
                    f"sdk runner check, graph {name}: input storage {k}: the bytes the two "
                    "left in it differ"
                )
        if not torch.equal(after, get_state()):
            raise RunnerMismatch(
                f"sdk runner check, graph {name}: the generator's state after the call differs"
            )
        return got

    call.cross_checked = True  # type: ignore[attr-defined]
    return call


def why_not(has_steps: bool, native_why: str | None) -> str:
    """Why ``runner="check"`` runs a program through one executor only (GraphReport.runner
    says "not checked" and this): it has no steps (``native_why``: which part has no step
    form), the runner refused its steps, or the runner could not be built here."""
    if not has_steps:
        return f"no steps: {native_why}" if native_why else "no steps"
    if native_why:
        return native_why
    from . import native

    return f"the native runner could not be built: {native.why_not() or 'unknown'}"


def _generator(device: torch.device) -> tuple[Callable[[], torch.Tensor], Callable]:
    """The get and set of ``device``'s default generator's state."""
    if device.type == torch.default_generator.device.type:
        return torch.get_rng_state, torch.set_rng_state
    mod = torch.get_device_module(device)
    return (lambda: mod.get_rng_state(device)), (lambda s: mod.set_rng_state(s, device))


def _copies(args: Any) -> tuple[list, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The inputs over copies of their storages (one copy per storage shared), and each
    storage's bytes beside its copy's."""
    storages: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        storage = a.untyped_storage()
        key = storage.data_ptr()
        if key not in storages:
            flat = torch.empty(storage.nbytes(), dtype=torch.uint8, device=a.device)
            flat.untyped_storage().copy_(storage)
            whole = torch.empty((0,), dtype=torch.uint8, device=a.device)
            storages[key] = (whole.set_(storage), flat)
        flat = storages[key][1]
        view = torch.empty((0,), dtype=a.dtype, device=a.device)
        view.set_(flat.untyped_storage(), a.storage_offset(), a.shape, a.stride())
        out.append(view)
    return out, list(storages.values())


def _compare(name: str, what: str, want: Any, got: Any) -> None:
    want = tuple(want) if isinstance(want, (list, tuple)) else (want,)
    got = tuple(got) if isinstance(got, (list, tuple)) else (got,)
    if len(want) != len(got):
        raise RunnerMismatch(
            f"sdk runner check, graph {name}: {len(got)} {what}s from the native runner, "
            f"{len(want)} from the interpreter"
        )
    for i, (a, b) in enumerate(zip(want, got)):
        why = _differs(a, b)
        if why:
            raise RunnerMismatch(f"sdk runner check, graph {name}: {what} {i}: {why}")


def _differs(a: Any, b: Any) -> str:
    """Why ``b`` (the runner's) is not ``a`` (the interpreter's), bit for bit; '' if it is."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return "" if type(a) is type(b) and a == b else f"{b!r} (native) != {a!r} (interpreter)"
    layout = (a.dtype, a.shape, a.stride(), a.device)
    if layout != (b.dtype, b.shape, b.stride(), b.device):
        return f"{(b.dtype, b.shape, b.stride(), b.device)} (native) != {layout} (interpreter)"
    if a.is_meta:  # (no bytes: the layout is all there is)
        return ""
    return "" if torch.equal(_bits(a), _bits(b)) else "the bits differ"


def _error(exc: BaseException) -> str:
    """``exc``'s type and message, for comparing and naming; an exception whose ``str()``
    raises (a vendor's) is "<unprintable TYPE>", as Python's traceback prints it."""
    try:
        said = str(exc)
    except Exception:  # noqa: BLE001 - the message is the exception's own defect
        said = f"<unprintable {type(exc).__name__}>"
    return f"{type(exc).__name__}: {said}"


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as integers of their width: equal exactly where the bits are."""
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(_INTS[t.element_size()])


_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
