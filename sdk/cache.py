"""The per-user on-disk cache, for every plugin: private directories, verified entries.

``cache_dir(*parts)`` is a directory only the current user can use;
``DiskCache(namespace)`` stores bytes under keys (both take ``root=``, a cache root of the
caller's own instead of ``$SDK_CACHE_DIR``'s, passed rather than set in the environment) and reads a corrupt, foreign
or unsafe entry as a miss; ``stable_hash(*parts)`` builds keys; ``source_digest(*packages)``
hashes a plugin's own sources (for ``sdk_cache_key``); ``write_atomic(path, data)`` replaces
a file so readers never see it half written; ``read_regular(path)`` reads a private regular
file (never a FIFO, never through a link); ``make_room(path)`` clears a path for a rename.
``cold_compiles()`` and ``fresh_directories()`` make this process's next compiles cold (a
benchmark's).
The root is the SDK's only where it holds the marker file ``CACHEDIR.TAG`` (written
into a new or empty directory); a directory of other files, ``/`` or the home directory is
refused. A refused cache directory warns once (:class:`sdk.CacheDirWarning`) and the process caches
in a private temporary directory instead.
"""

from sdk._diskcache import (
    CacheDirRefused,
    DiskCache,
    cache_dir,
    make_room,
    read_regular,
    source_digest,
    stable_hash,
    write_atomic,
)

#: the variables naming the on-disk compile caches a compile may read: the SDK's,
#: Inductor's and Triton's
CACHE_VARIABLES = ("SDK_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def fresh_directories() -> dict[str, str]:
    """Point the SDK's, Inductor's and Triton's on-disk caches (:data:`CACHE_VARIABLES`) at
    new, empty private directories for the rest of this process (each is read when next
    looked up): the next compile finds nothing on disk. Returns the directories by variable;
    removing them is the caller's."""
    import tempfile

    from sdk import _config as config

    dirs = {}
    for var in CACHE_VARIABLES:
        # mode 0o700
        dirs[var] = tempfile.mkdtemp(prefix=f"sdk-cold-{var.split('_')[0].lower()}-")
    config.set_variables(**dirs)
    return dirs


def cold_compiles() -> None:
    """Switch off torch's own caches of compiled graphs for this process (Inductor's FX
    graph cache, AOTAutograd's cache), which would otherwise turn a cold compile into a cache
    load: what a benchmark of compile times wants (with :func:`fresh_directories` before each
    compile, and :func:`sdk.reset`)."""
    from sdk._seams import private_torch

    private_torch().configure_for_benchmark()


__all__ = [
    "CACHE_VARIABLES",
    "CacheDirRefused",
    "DiskCache",
    "cache_dir",
    "cold_compiles",
    "fresh_directories",
    "make_room",
    "read_regular",
    "source_digest",
    "stable_hash",
    "write_atomic",
]
