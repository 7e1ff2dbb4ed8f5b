"""The per-user on-disk cache, for every plugin: private directories, verified entries.

``cache_dir(*parts)`` is a directory only the current user can use;
``DiskCache(namespace)`` stores bytes under keys and reads a corrupt, foreign
or unsafe entry as a miss; ``stable_hash(*parts)`` builds keys; ``source_digest(*packages)``
hashes a plugin's own sources (for ``sdk_cache_key``); ``write_atomic(path, data)`` replaces
a file so readers never see it half written.
"""

from sdk.core.cache import DiskCache, cache_dir, source_digest, stable_hash, write_atomic

__all__ = ["DiskCache", "cache_dir", "source_digest", "stable_hash", "write_atomic"]
