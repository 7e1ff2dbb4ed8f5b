"""Every environment variable the SDK reads, read in this one place: in the contract package,
which the core depends on, so that the contract's own readers (``sdk.toolchain``'s compiler,
``sdk.cache``'s directories, ``sdk.plugin.environment_variable``) need not import the core
(issue 48). Not public API: a plugin reads its variables through
``sdk.plugin.environment_variable``.

The core's own variables are the typed fields of :class:`Env`. The public layer and plugins
read theirs (a compiler path, a vendor's switch) through :func:`variable`, and set them for a
block through :func:`overridden`, so that no other module touches ``os.environ``
(``tests/contract/test_architecture.py`` holds the tree to that).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass


def _names(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class Env:
    #: SDK_PLUGINS_ALLOW: comma-separated plugin names; when set, only these are imported.
    plugins_allow: frozenset[str] | None
    #: SDK_PLUGINS_DENY: comma-separated plugin names that are never imported.
    plugins_deny: frozenset[str]
    #: SDK_DEBUG=1: the ``debug`` option for every compile (IR checker after every stage, a
    #: plugin's errors raised); folded into ``sdk.CoreOptions.debug`` by core.options.resolve
    debug: bool
    #: SDK_CACHE_DIR: root of the per-user cache (default ~/.cache/torch-backend-sdk).
    cache_dir: str | None
    #: XDG_CACHE_HOME: where per-user caches live when SDK_CACHE_DIR is unset.
    xdg_cache_home: str | None
    #: SDK_GRAPH_CACHE=0: keep compiled programs out of the whole-graph cache (default on);
    #: folded into ``sdk.CoreOptions.cache`` by core.options.resolve
    graph_cache: bool = True
    #: SDK_RUNNER: the default of the ``runner`` option ("native", "python" or "check"; an
    #: option given to the compile wins); folded in by core.options.resolve
    runner: str | None = None


def env() -> Env:
    """Read the environment now (cheap). A compile reads it once, where its options are
    parsed (:func:`core.options.resolve`); nothing after reads it again."""
    e = os.environ
    return Env(
        plugins_allow=_names(e.get("SDK_PLUGINS_ALLOW")),
        plugins_deny=_names(e.get("SDK_PLUGINS_DENY")) or frozenset(),
        debug=e.get("SDK_DEBUG", "") not in ("", "0", "false", "False"),
        cache_dir=e.get("SDK_CACHE_DIR") or None,
        xdg_cache_home=e.get("XDG_CACHE_HOME") or None,
        graph_cache=e.get("SDK_GRAPH_CACHE", "1") not in ("0", "false", "False", "off"),
        runner=e.get("SDK_RUNNER", "").strip() or None,
    )


#: SDK_COMPILE_TIMEOUT's default: seconds one run of a host compiler (sdk.toolchain) may take.
COMPILE_TIMEOUT = 300.0


def compile_timeout() -> float | None:
    """SDK_COMPILE_TIMEOUT: the seconds one run of a host C/C++ compiler may take before it is
    killed (default :data:`COMPILE_TIMEOUT`); None when it is 0 (no limit). ValueError, naming
    the variable, for anything but a number >= 0."""
    raw = os.environ.get("SDK_COMPILE_TIMEOUT", "").strip()
    if not raw:
        return COMPILE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise ValueError(
            f"SDK_COMPILE_TIMEOUT is {raw!r}: it must be the seconds a compiler run may take, "
            f"a number >= 0 (0: no limit; unset: {COMPILE_TIMEOUT:g}). Fix: set it to such a "
            "number or unset it."
        )
    return value or None


def lock_wait() -> float:
    """The seconds a process waits for another's build of the same library (sdk.toolchain's
    build lock) before it gives up: SDK_COMPILE_TIMEOUT (by then the holder's compiler has
    been killed), and :data:`COMPILE_TIMEOUT` when that is 0: "no limit" is for a compiler
    run, never for a wait on another process, which may be stopped or hung."""
    timeout = compile_timeout()
    return COMPILE_TIMEOUT if timeout is None else timeout


def variable(name: str) -> str | None:
    """The environment variable ``name`` now, or None when unset."""
    return os.environ.get(name)


def set_variables(**values: str | None) -> dict[str, str | None]:
    """Set (None: unset) environment variables; returns their previous values, which
    ``set_variables(**previous)`` restores."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return old


@contextlib.contextmanager
def overridden(**values: str | None) -> Iterator[None]:
    """Set environment variables for the block (the SDK reads them when it needs them).
    The process's environment: every thread and every child process started meanwhile sees
    them too, so never use it to hand a value to one call (pass an argument instead, as the
    native runner passes ``$SDK_RUNNER_DIR`` as a cache root)."""
    old = set_variables(**values)
    try:
        yield
    finally:
        set_variables(**old)


def compile_workers(auto: int) -> int:
    """SDK_COMPILE_WORKERS: how many compile worker processes ``sdk.workers`` starts: a
    whole number (0 or 1: none), or ``auto`` (``auto`` of them), the default when unset.
    ValueError, naming the variable, for anything else."""
    raw = os.environ.get("SDK_COMPILE_WORKERS", "").strip()
    if not raw or raw == "auto":
        return auto
    if not raw.isdigit():
        raise ValueError(
            f"SDK_COMPILE_WORKERS is {raw!r}: it must be how many compile worker processes to "
            "start, a whole number >= 0 (0 or 1: none, kernels compile in this process), or "
            "'auto' (one per CPU this process may run on, at most 32; the default). Fix: set it "
            "to one of those or unset it."
        )
    return int(raw)


def variables_with(prefixes: tuple[str, ...]) -> dict[str, str]:
    """The environment variables whose names start with one of ``prefixes``, now."""
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


def replace_variables(prefixes: tuple[str, ...], values: dict[str, str]) -> None:
    """Make the variables with ``prefixes`` exactly ``values``: set those, unset the others
    (a compile worker taking its caller's environment)."""
    stale = {k: None for k in os.environ if k.startswith(prefixes) and k not in values}
    set_variables(**stale, **values)
