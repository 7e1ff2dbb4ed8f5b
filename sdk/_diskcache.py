"""The per-user on-disk cache every plugin uses (public as :mod:`sdk.cache`), in the contract
package: the core keeps its programs in it too (core/graph_cache.py), and depends on it here.

Layout: one root directory (see :func:`_root`) holding the marker file
``CACHEDIR.TAG`` (see :data:`MARKER`) and one sub-directory per namespace. Every
directory is created with mode 0o700 and, before use, checked to be owned by the
current user and not group/world writable; a directory that fails the check is
refused with a :class:`PermissionError` that says how to fix it. Entry files are
written atomically with mode 0o600.

The marker is what makes a directory the SDK's: the root is used only if it holds the
SDK's marker, or is empty (or new), when the marker is written; a directory with other
content and no marker (a home directory, ``~/.cache``) is refused, as are ``/`` and the
home directory itself, so ``cache clear`` can never delete what the SDK did not write
(it deletes only files whose names are the SDK's own: :func:`own_name`). A home
directory that cannot be determined (``~nosuchuser/x``, no ``HOME`` and no passwd entry)
is a refusal too.

An entry written by :meth:`DiskCache.put` is a small header followed by the
payload::

    MAGIC | key length (4 bytes, little endian) | key (utf-8) | sha256(payload) | payload

:meth:`DiskCache.get` checks all of it, so a truncated, corrupted, foreign or
unsafe entry reads as a miss. Entries are not fsync'ed: a crash can at worst
leave an entry that fails this check, which is a miss too.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
import warnings
from pathlib import Path

_MAGIC = b"sdk-cache-entry-v1\n"
_DIR_MODE = 0o700
_FILE_MODE = 0o600
_DEFAULT_NAME = "torch-backend-sdk"

#: the marker file in the cache root: a Cache Directory Tag (backup tools skip the
#: directory) whose second line says it is the SDK's
MARKER = "CACHEDIR.TAG"
_MARKER_HEAD = b"Signature: 8a477f597d28d172789f06886806bc55\n# torch-backend-sdk cache directory\n"
_MARKER_TEXT = _MARKER_HEAD + (
    b"# Written by the SDK when it made this directory its cache; `python -m sdk cache clear`\n"
    b"# removes only the SDK's own files here. See https://bford.info/cachedir/\n"
)
_MARKER_TMP = ".tmp-tag-"


def _root(given: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """The cache root, and whether it is the default one: ``given`` (a caller's own root,
    such as the native runner's ``$SDK_RUNNER_DIR``), else ``$SDK_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/torch-backend-sdk``, else ``~/.cache/torch-backend-sdk`` (read
    through :mod:`sdk._config`). Raises :class:`CacheDirRefused` where a home directory is
    needed and cannot be determined."""
    from sdk._config import env

    e = env()
    configured = os.fspath(given) if given else e.cache_dir
    if configured:
        try:
            return Path(configured).expanduser(), False
        except (RuntimeError, KeyError, OSError) as exc:
            named = "" if given else " (SDK_CACHE_DIR)"
            raise CacheDirRefused(
                f"refusing to use cache directory {configured}{named}: the home "
                f"directory it names cannot be determined ({exc}). Fix: name it by an "
                "absolute path of a private directory (owned by you, mode 0700)."
            ) from exc
    xdg = e.xdg_cache_home
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / _DEFAULT_NAME, True
    try:
        return Path.home() / ".cache" / _DEFAULT_NAME, True
    except (RuntimeError, KeyError, OSError) as exc:
        raise CacheDirRefused(
            f"no cache directory: SDK_CACHE_DIR and XDG_CACHE_HOME are unset and the home "
            f"directory cannot be determined ({exc}: HOME unset, and no passwd entry for "
            f"uid {os.geteuid()}). Fix: set SDK_CACHE_DIR to an absolute path of a private "
            "directory (owned by you, mode 0700)."
        ) from exc


def _homes() -> set[str]:
    """The current user's home directory, as far as it can be determined (resolved)."""
    homes = set()
    with contextlib.suppress(RuntimeError, KeyError, OSError):
        homes.add(os.path.realpath(Path.home()))
    with contextlib.suppress(KeyError, OSError, ImportError):
        import pwd

        homes.add(os.path.realpath(pwd.getpwuid(os.geteuid()).pw_dir))
    return homes


def _is_private(st: os.stat_result) -> bool:
    """Owned by the current user and writable by nobody else."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _ensure_private_dir(path: Path) -> None:
    """Create ``path`` with mode 0o700 if missing, then refuse it unless it is private."""
    try:
        path.mkdir(mode=_DIR_MODE)
        os.chmod(path, _DIR_MODE)  # mkdir's mode is masked by the umask
    except FileExistsError:
        pass
    except OSError as exc:  # under a regular file, a read-only parent, ...
        raise _refusal(path, f"not creatable ({exc.strerror or exc})") from exc
    try:
        st = os.stat(path)
    except OSError as exc:  # a dangling symbolic link, a loop of them
        raise _refusal(path, f"not usable ({exc.strerror or exc})") from exc
    cause = not_private(st)
    if cause is None and not os.access(path, os.W_OK | os.X_OK):
        cause = f"not writable by the current user (mode {stat.S_IMODE(st.st_mode):#o})"
    if cause is not None:
        raise _refusal(path, cause)


def not_private(st: os.stat_result) -> str | None:
    """Why the directory of ``st`` is not private to the current user, or None."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by the current user (uid {os.geteuid()})"
    if not _is_private(st):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):#o})"
    return None


class CacheDirRefused(PermissionError):
    """A cache directory that may not be used; ``str()`` names it, the cause and the fix."""


def _refusal(path: Path, cause: str) -> CacheDirRefused:
    return CacheDirRefused(
        f"refusing to use cache directory {path}: it is {cause}; a cache directory must be "
        "a private directory (owned by you, mode 0700), or another user could plant files "
        "that would be loaded as compiled code. Fix: set SDK_CACHE_DIR to a private "
        "directory (owned by you, mode 0700), or repair this one."
    )


def _not_a_cache(path: Path, cause: str) -> CacheDirRefused:
    return CacheDirRefused(
        f"refusing to use cache directory {path}: it is {cause}, so it is not an SDK cache "
        f"(an SDK cache holds the marker file {MARKER}, written when the SDK makes an empty "
        "or new directory its cache), and the SDK never writes into or deletes from a "
        "directory of other files. Fix: set SDK_CACHE_DIR to a new or empty directory of "
        "its own, e.g. ~/.cache/torch-backend-sdk."
    )


def _marked(root: Path) -> bool:
    data = read_regular(root / MARKER)
    return data is not None and data.startswith(_MARKER_HEAD)


def _ensure_marked(root: Path, default: bool) -> None:
    """Refuse ``root`` unless it holds the SDK's marker; an empty directory (or the
    default root, whose name is the SDK's) gets one."""
    if _marked(root):
        return
    try:
        names = [n for n in os.listdir(root) if not n.startswith(_MARKER_TMP)]
    except OSError as exc:
        raise _refusal(root, f"not readable ({exc.strerror or exc})") from exc
    if _marked(root):  # another process adopted it meanwhile (its marker, then its files)
        return
    if MARKER in names:
        raise _not_a_cache(root, f"a directory whose {MARKER} is not the SDK's")
    if names and not default:
        shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
        raise _not_a_cache(root, f"a directory of other files ({shown}) with no {MARKER}")
    fd, tmp = tempfile.mkstemp(dir=root, prefix=_MARKER_TMP)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MARKER_TEXT)
        os.replace(tmp, root / MARKER)  # (two processes adopting at once: both write it)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _checked(root: Path, parts: tuple[str, ...], default: bool = False) -> Path:
    real = os.path.realpath(root)
    if real == os.path.realpath("/"):
        raise _not_a_cache(root, "the file system's root directory")
    if real in _homes():
        raise _not_a_cache(root, "your home directory itself")
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refusal(root, f"not creatable ({exc.strerror or exc})") from exc
    _ensure_private_dir(root)
    _ensure_marked(root, default)
    path = root
    for part in parts:
        path = path / part
        _ensure_private_dir(path)
    return path


_private_root: Path | None = None
_warned: set[str] = set()
_lock = threading.Lock()


def _process_root() -> Path:
    """A private directory of this process (mode 0700, removed at exit): where the cache
    lives when the configured one is refused, so compiles still run, only uncached."""
    global _private_root
    with _lock:
        if _private_root is None or not _private_root.is_dir():
            _private_root = Path(tempfile.mkdtemp(prefix="sdk-cache-"))
            atexit.register(shutil.rmtree, _private_root, True)
        return _private_root


def cache_dir(
    *parts: str, strict: bool = False, root: str | os.PathLike[str] | None = None
) -> Path:
    """The cache directory ``<root>/<parts...>``, created private (0o700) and checked.

    ``root``: a cache root of the caller's own (the native runner's ``$SDK_RUNNER_DIR``)
    instead of the SDK's (``$SDK_CACHE_DIR``, ...), checked the same way; passed, never put
    in the process environment, which other threads and child processes read.
    The root must hold the SDK's marker (:data:`MARKER`); an empty or new one gets it, one
    with other content and no marker, ``/`` and the home directory are refused.
    Each part is one plain path component. A root or sub-directory that is not a private
    directory of the current user (another owner, group/world writable, not writable, a
    file, a dangling symlink, under a regular file), a root that is not an SDK cache, or a
    default root with no home directory to put it in, is refused: with ``strict``, by raising
    :class:`CacheDirRefused` (a :class:`PermissionError`); otherwise with one
    :class:`sdk.CacheDirWarning` per directory and cause, naming the fix, and the directory
    of the same parts under a private temporary root of this process is returned instead:
    compiles go on, and nothing is kept for later processes.
    """
    for part in parts:
        check_part(part)
    try:
        where, default = _root(root)
        return _checked(where, parts, default)
    except CacheDirRefused as exc:
        if strict:
            raise
        message = str(exc)
        with _lock:
            first = message not in _warned
            _warned.add(message)
        if first:
            from sdk.errors import CacheDirWarning

            warnings.warn(
                f"{message} Until then, this process caches in a private temporary "
                "directory, removed at exit.",
                CacheDirWarning,
                stacklevel=2,
            )
        return _checked(_process_root(), parts)


#: the names of the files the SDK writes in a namespace: an entry, library, source, build
#: lock or precompiled prelude (:mod:`sdk._prelude`) named by :meth:`DiskCache.path_for` (sha256 hex, a ``.<16 hex>`` library digest, a
#: suffix), or a kernel source named by a digest with a one-letter prefix (``k<hex>.py``)
_OWN_NAME = re.compile(
    r"[a-z]?[0-9a-f]{40,64}(\.[0-9a-f]{16})?\.(entry|so|c|cpp|py|lock|h\.gch|h\.pch)"
)


def own_name(name: str) -> bool:
    """Whether ``name`` is one the SDK gives the cache files it writes (what ``cache clear``
    may delete; its temporaries are ``.tmp-*``)."""
    return _OWN_NAME.fullmatch(name) is not None


def remove_lock(path: Path) -> bool | None:
    """Delete the build lock file ``path`` (``sdk.toolchain``'s) unless a process holds it:
    True when it went, False when it is held (kept: a build is running, and a new process
    would otherwise lock a new file at the path and build beside it), None when it was gone.
    It is locked while it is unlinked; a process that opened it before and locks it after
    finds it no longer at its path and opens the new one (``sdk.toolchain._take_lock``)."""
    try:
        import fcntl
    except ImportError:  # (no build locks there)
        fcntl = None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:  # a link, or unreadable: not a lock anyone could hold
        return _unlinked(path)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            except OSError:  # no locks on this file system: no build holds one either
                pass
        return _unlinked(path)
    finally:
        os.close(fd)


def _unlinked(path: Path) -> bool | None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return None
    return True


def check_part(part: str) -> None:
    """Raise ``ValueError`` unless ``part`` is one plain path component."""
    if not part or part in (".", "..") or "/" in part:
        raise ValueError(f"cache directory part {part!r} must be a plain name")


def _canonical(part: object) -> bytes:
    """Type-tagged, length-prefixed encoding: distinct values never encode alike."""
    if isinstance(part, bytes):
        tag, body = b"b", part
    elif isinstance(part, str):
        tag, body = b"s", part.encode("utf-8", "surrogatepass")
    elif isinstance(part, bool):  # before int: True must not hash like 1
        tag, body = b"?", b"1" if part else b"0"
    elif isinstance(part, int):
        tag, body = b"i", str(part).encode()
    elif isinstance(part, tuple):
        tag, body = b"t", b"".join(_canonical(p) for p in part)
    else:
        raise TypeError(f"stable_hash takes str, bytes, int and tuples, not {type(part).__name__}")
    return tag + len(body).to_bytes(8, "little") + body


def source_digest(*packages: str) -> str:
    """sha256 over the Python sources of ``packages`` (imported by name; sub-packages are
    walked too): a plugin's cache keys change with its code, version bump or not."""
    import importlib
    from pathlib import Path

    h = hashlib.sha256()
    for name in packages:
        module = importlib.import_module(name)
        dirs = getattr(module, "__path__", None) or [str(Path(module.__file__).parent)]
        for d in dirs:
            base = Path(d)
            for path in sorted(base.rglob("*.py")):
                h.update(f"{name}/{path.relative_to(base)}".encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def stable_hash(*parts: object) -> str:
    """sha256 hex of a canonical encoding of ``parts`` (str, bytes, int, nested tuples).

    Stable across processes and Python versions, unlike :func:`hash`.
    """
    return hashlib.sha256(_canonical(parts)).hexdigest()


class DiskCache:
    """Bytes stored under string keys in ``cache_dir(namespace, root=root)``.

    The directory is resolved on every call, so a change of ``SDK_CACHE_DIR`` takes
    effect at once (``root``, where given, replaces it: :func:`cache_dir`). :meth:`get`
    never raises for a bad entry; a cache directory that fails the ownership/mode check
    raises :class:`PermissionError` from :meth:`get` and :meth:`put` alike.
    """

    def __init__(self, namespace: str, root: str | os.PathLike[str] | None = None) -> None:
        self.namespace = namespace
        self.root = root

    def path_for(self, key: str, suffix: str) -> Path:
        """The file for ``key`` with ``suffix`` (e.g. ``".so"``); the name is sha256(key)."""
        name = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return cache_dir(self.namespace, root=self.root) / (name + suffix)

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None when missing or not trustworthy."""
        blob = read_regular(self.path_for(key, ".entry"))
        return None if blob is None else _decode(blob, key)

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``: written to a temp file, then renamed into place."""
        path = self.path_for(key, ".entry")
        key_bytes = key.encode("utf-8", "surrogatepass")
        header = _MAGIC + len(key_bytes).to_bytes(4, "little") + key_bytes
        write_atomic(path, header + hashlib.sha256(data).digest() + data)


def read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a private regular file, else None: never follows a
    symbolic link, never blocks (a FIFO or device at an entry path is not opened for
    reading in earnest), never raises for what is there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and _is_private(st)):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def make_room(path: Path) -> None:
    """Remove what is at ``path`` unless it is a regular file (a directory, a FIFO, a link),
    so an entry can be renamed into place: a bad thing at an entry path is repaired by the
    next write instead of failing it for good."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one.

    A temp file (mode 0o600) in the same directory is renamed into place, so two
    processes writing the same entry at once never leave a torn file.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        make_room(path)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _decode(blob: bytes, key: str) -> bytes | None:
    """The payload of an entry if its magic, key and hash all check out, else None."""
    if not blob.startswith(_MAGIC):
        return None
    pos = len(_MAGIC)
    key_len = int.from_bytes(blob[pos : pos + 4], "little")
    pos += 4
    if blob[pos : pos + key_len] != key.encode("utf-8", "surrogatepass"):
        return None
    pos += key_len
    digest, payload = blob[pos : pos + 32], blob[pos + 32 :]
    if len(digest) != 32 or hashlib.sha256(payload).digest() != digest:
        return None
    return payload
