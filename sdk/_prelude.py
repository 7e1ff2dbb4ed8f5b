"""Precompiled preludes for :mod:`sdk.toolchain`: the text every translation unit of a plugin
starts with (its includes and helpers) is parsed once per compiler, flags and text, not once
per unit.

A plugin passes that text as ``compile_library(source, prelude=...)``, ``source`` starting
with it. The :data:`PRECOMPILE_AT`-th unit of a process that needs it precompiles it (GCC's
``.gch``, Clang's ``.pch``) into the cache, keyed by the text, the compiler, its identity and
the flags, with the file's sha256 in a :class:`~sdk.cache.DiskCache` entry; later processes
use it from their first unit. A unit is then built from its remainder, with ``-include``
of the prelude as a header in the build's private directory and the precompiled form beside it
(a hard link, checked against the recorded digest: a file in the cache that is not what was
built is rebuilt, never used).

The library is the same either way: a compiler reads a precompiled header as the state its
text leaves, and one that finds it unusable (other flags, another version) reads the text
beside it instead. So the library's cache key is still the whole source. Where there is no
precompiled prelude (a compiler other than GCC or Clang, a failed precompile, a file system
without hard links), the unit is the whole source, as before.

Measured (gcc 12, cpu_cpp's prelude: ``<cmath>``, ``<algorithm>``, ``<vector>`` and its
helpers): a unit of one kernel took 0.32 s, 0.19 s of it parsing the prelude; against the
precompiled prelude, 0.11 s; the precompile took 0.7 s. The precompiled file is about 25 MB,
once per plugin version and flags.
"""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk.cache import DiskCache, make_room, read_regular, stable_hash

#: the precompiled form's suffix by compiler family; the header beside it is ``.h``
_SUFFIX = {"gcc": ".h.gch", "clang": ".h.pch"}

#: A prelude is precompiled by the unit that needs it this many times in one process and
#: cache, where the cache holds none yet: the precompile (0.7 s with cpu_cpp's) pays for
#: itself from the fourth unit (0.2 s saved each), so a process that builds one or two units
#: (a cold compile of a small model) is not slowed by it. A precompiled prelude already in
#: the cache is used from the first unit.
PRECOMPILE_AT = 4

#: precompiles that failed in this process (not tried again): their keys
_failed: set[str] = set()
#: units that needed a prelude not yet precompiled in this process, by its precompiled path
_needed: collections.Counter[Path] = collections.Counter()
#: precompiled files already checked in this process: (device, inode, size, mtime). Not the
#: ctime: each unit's hard link changes it (this process's and every other's), so with it
#: each unit read and hashed the 25 MB file again (about 35 ms of a 110 ms unit). A file
#: replaced is another inode; one rewritten in place has another mtime.
_checked: set[tuple[int, ...]] = set()


def family(identity: str) -> str | None:
    """``"gcc"`` or ``"clang"`` from a compiler's ``--version`` text, else None."""
    low = identity.lower()
    if "clang" in low:
        return "clang"
    if "free software foundation" in low or "gcc" in low:
        return "gcc"
    return None


@dataclass(frozen=True)
class Compiler:
    """A compiler as :mod:`sdk.toolchain` runs it: its path, identity (``--version`` and what
    ``-march=native`` means), language and flags, and ``run`` (a command's completed
    process, within ``SDK_COMPILE_TIMEOUT``)."""

    path: str
    identity: str
    language: str
    flags: tuple[str, ...]
    run: Callable[[list[str]], Any]


def header(
    cache: DiskCache,
    prelude: str,
    compiler: Compiler,
    *,
    lock: Callable[[Path, str], Any],
    into: Path,
) -> Path | None:
    """The prelude as a header in ``into`` (a build's private directory) with its
    precompiled form beside it, built first where the cache holds none; None where there is
    none to use (the unit then holds the prelude's text)."""
    kind = family(compiler.identity)
    if kind is None or not prelude:
        return None
    key = stable_hash(
        "prelude", prelude, compiler.path, compiler.identity, compiler.language, compiler.flags
    )
    if key in _failed:
        return None
    built = cache.path_for(key, _SUFFIX[kind])
    linked = into / ("prelude" + _SUFFIX[kind])
    if not _linked(cache, key, built, linked):
        _needed[built] += 1
        if _needed[built] < PRECOMPILE_AT:
            return None
        try:
            with lock(cache.path_for(key, ".lock"), f"the precompiled prelude {built}"):
                done = _recorded(cache, key, built) is not None or _precompile(
                    cache, key, built, prelude, compiler
                )
        except (OSError, RuntimeError):  # a compiler run or a lock wait past its limit
            done = False
        if not done:  # (the units compile whole, as without a prelude)
            _failed.add(key)
            return None
        if not _linked(cache, key, built, linked):
            return None
    head = into / "prelude.h"
    head.write_text(prelude)
    return head


def _linked(cache: DiskCache, key: str, built: Path, linked: Path) -> bool:
    """Whether the precompiled prelude at ``built`` is now at ``linked`` too (a hard link in
    the build's directory: a clear cannot remove it under the compiler) and is what was
    recorded under ``key``."""
    try:
        os.link(built, linked)
    except OSError:  # none yet (or no hard links here)
        return False
    if _recorded(cache, key, linked) is None:
        linked.unlink()
        return False
    return True


def _recorded(cache: DiskCache, key: str, path: Path) -> str | None:
    """The digest recorded under ``key`` where the file at ``path`` has it (a private,
    regular file; read once per process and file), else None."""
    try:
        recorded = cache.get(key)
    except OSError:  # (a cache directory refused)
        return None
    if recorded is None or len(recorded) != 64:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if seen in _checked:
        return recorded.decode()
    data = read_regular(path)
    if data is None or hashlib.sha256(data).hexdigest().encode() != recorded:
        return None
    _checked.add(seen)
    return recorded.decode()


def _precompile(cache: DiskCache, key: str, built: Path, prelude: str, compiler: Compiler) -> bool:
    """Precompile ``prelude`` into ``built`` (in a private directory, then renamed into
    place) and record its digest under ``key``; False where the compiler refuses."""
    work = Path(tempfile.mkdtemp(dir=built.parent, prefix=".tmp-build-"))
    try:
        head = work / "prelude.h"
        head.write_text(prelude)
        out = work / ("prelude" + built.name[built.name.index(".") :])
        header_of = f"{compiler.language}-header"
        proc = compiler.run(
            [compiler.path, "-x", header_of, str(head), "-o", str(out), *compiler.flags]
        )
        if proc.returncode != 0 or not out.is_file():
            return False
        os.chmod(out, 0o600)
        digest = hashlib.sha256(out.read_bytes()).hexdigest()
        make_room(built)
        os.replace(out, built)
    except OSError:
        return False
    finally:
        shutil.rmtree(work, ignore_errors=True)
    try:
        cache.put(key, digest.encode())
    except OSError:  # unrecorded, it could not be checked: not used, and not built again
        return False
    return True


def remainder(source: str, prelude: str, full: Path) -> str:
    """``source`` after ``prelude``, its lines numbered as in the whole source at ``full``
    (the file a compiler error names)."""
    line = prelude.count("\n") + 1
    name = str(full).replace("\\", "\\\\").replace('"', '\\"')
    return f'#line {line} "{name}"\n' + source[len(prelude) :]
