"""Large preprocess results stored once their batch is done, by a forked child
(:mod:`..cache.detached`), not in the caller's way while the workers run.

Storing one large result costs the caller its pickling, the plain-data check, the MAC and
the write: ~0.6 s for the output projection of Llama 3.2 1B's vocabulary (~150 MB of
named data), while the preprocess workers want every core. A result of at least
:data:`HOLD_MIN_BYTES` is held until the batch ends; then one child,
forked then, stores all of them through its own connection, at a lower priority (a
copy-on-write snapshot: results are bytes and plain records, never changed afterwards).
Where no child can be forked (no ``fork``, another thread alive, this process a child
itself) they are stored here, as smaller results are. A lookup in this process of a key a
child is still storing first waits for that child (:func:`wait_for`).
"""

from __future__ import annotations

import logging
import threading
from typing import Dict, List, Tuple

from executorch.exir.backend.backend_details import PreprocessResult

from ..cache import detached
from .cache import PreprocessCache

__all__ = ["HOLD_MIN_BYTES", "Held", "result_size", "wait_for"]

log = logging.getLogger("fastlower.cache")

HOLD_MIN_BYTES = 32 << 20  # below it, a store costs less than a fork
_LOCK = threading.Lock()
_CHILD_OF: Dict[str, str] = {}  # preprocess key -> the key its storing child is known by


def result_size(result: PreprocessResult) -> int:
    """Bytes a result's entry holds: its processed bytes and its named data."""
    size = len(result.processed_bytes)
    output = result.data_store_output
    if output is not None:
        size += sum(len(buffer) for buffer in output.buffers)
    return size


def wait_for(key: str) -> None:
    """Waits for this process's child storing ``key``, if there is one."""
    with _LOCK:
        child = _CHILD_OF.pop(key, None)
    if child is not None:
        detached.wait_for(child)


class Held:
    """The large results of one batch, to be stored by :meth:`store` when it is done."""

    def __init__(self, cache: PreprocessCache) -> None:
        self.cache = cache
        self.entries: List[Tuple[str, PreprocessResult, str]] = []

    def put(self, key: str, result: PreprocessResult, made: str = "backend") -> None:
        """``cache.put`` now for a small result; a large one is held."""
        if self.cache.read_only:
            return  # nothing is stored in a read-only folder
        size = result_size(result)
        if size >= HOLD_MIN_BYTES and detached.can_detach(size):
            self.entries.append((key, result, made))
        else:
            self.cache.put(key, result, made)

    def store(self) -> None:
        """Stores what is held: in a forked child, or here if none can be forked."""
        entries, self.entries = self.entries, []
        if not entries:
            return
        cache = self.cache
        child = f"preprocess:{entries[0][0]}"

        def in_child() -> None:
            own = PreprocessCache(cache.directory, cache.size_limit, cache.key_file)
            try:
                for key, result, made in entries:
                    own.put(key, result, made)
                for error in own.write_errors:
                    log.warning("fastlower: a preprocess result was not stored: %s", error)
            finally:
                own.close()

        size = sum(result_size(result) for _, result, _ in entries)
        if detached.store_detached(child, size, in_child, before_fork=cache.store.close):
            with _LOCK:
                _CHILD_OF.update((key, child) for key, _, _ in entries)
            return
        for key, result, made in entries:
            cache.put(key, result, made)
