"""The per-user on-disk cache, for every plugin: private directories, verified entries.

``cache_dir(*parts)`` is a directory only the current user can use;
``DiskCache(namespace)`` stores bytes under keys and reads a corrupt, foreign
or unsafe entry as a miss; ``stable_hash(*parts)`` builds keys; ``source_digest(*packages)``
hashes a plugin's own sources (for ``sdk_cache_key``); ``write_atomic(path, data)`` replaces
a file so readers never see it half written; ``read_regular(path)`` reads a private regular
file (never a FIFO, never through a link); ``make_room(path)`` clears a path for a rename.
The root is the SDK's only where it holds the marker file ``CACHEDIR.TAG`` (written
into a new or empty directory); a directory of other files, ``/`` or the home directory is
refused. A refused cache directory warns once (:class:`sdk.CacheDirWarning`) and the process caches
in a private temporary directory instead.
"""

from sdk.core.cache import (
    CacheDirRefused,
    DiskCache,
    cache_dir,
    make_room,
    read_regular,
    source_digest,
    stable_hash,
    write_atomic,
)

__all__ = [
    "CacheDirRefused",
    "DiskCache",
    "cache_dir",
    "make_room",
    "read_regular",
    "source_digest",
    "stable_hash",
    "write_atomic",
]
