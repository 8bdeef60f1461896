"""How large the cache folder may grow, and what happens to an entry it cannot keep.

A lowering entry and a ``to_executorch`` entry are each about the size of the model's
``.pte``: ~1.25 GB for Llama 3.2 1B (8da4w, XNNPACK), ~5 GB for an 8B model. The
folder's default limit (2 GiB, ``fastlower.preprocess``'s) cannot hold both entries of
a 1B model, and ``diskcache`` evicts without a word: every export would miss. So:

* **Size left unset** (no ``cache_size`` option, no ``FASTLOWER_CACHE_SIZE``): the
  limit *follows the model*. It is the default or :data:`FOLLOW` times the folder's
  largest lowering-cache entry (the one being stored included), whichever is larger,
  but never more than the folder's disk can give (the cache's volume plus the free
  space, less :func:`reserve`). Four entries: a hit needs the lowering and the
  ``to_executorch`` entry; a new checkpoint's refit reads the old lowering entry while
  it stores the new two; a cold lowering also leaves its per-partition preprocess
  entries (at most about one entry's size).
* **Size set**: a hard limit, kept to.

Either way an entry larger than the limit is not written (writing it would make
``diskcache`` evict every other entry, and then this one), and one entry more than
half the limit is written but cannot stay beside its companion; each is said once per
process and folder with a :class:`~fastlower.preprocess.CacheWarning` naming the
entry's size, the limit and what to change. The lowering itself is never affected:
it returns its result, which just is not kept.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .. import settings as env
from .names import TAG

log = logging.getLogger("fastlower.cache")

FOLLOW = 4
_SETTING = f"{env.CACHE_SIZE} (or fastlower.preprocess.options(cache_size=...))"


def reserve(total: int) -> int:
    """Disk space a limit that follows the model leaves free: 5% of the disk, at least
    1 GiB and at most 20 GiB."""
    return min(max(total // 20, 1 << 30), 20 << 30)


def largest_entry(store: Any) -> int:
    """The size of the folder's largest lowering-cache entry (0 if none, or unknown)."""
    try:
        row = store._sql("SELECT MAX(size) FROM Cache WHERE tag = ?", (TAG,)).fetchone()
    except Exception as exc:  # a read-only cache, another version's schema
        log.debug("cannot size the cache's entries: %r", exc)
        return 0
    return int(row[0]) if row and row[0] else 0


def disk_room(directory: Path, volume: int) -> int:
    """What the cache may take of its disk: its volume plus the free space, less
    :func:`reserve` (unbounded when the disk cannot be asked)."""
    try:
        usage = shutil.disk_usage(directory)
    except OSError:
        return 1 << 62
    return max(volume + usage.free - reserve(usage.total), 0)


def followed(limit: int, largest: int, room: int) -> int:
    """The limit that follows the model: ``limit`` (the default) or :data:`FOLLOW` times
    the largest entry, whichever is larger, within ``room``."""
    return max(limit, min(FOLLOW * largest, room))


def human(size: int) -> str:
    """``size`` bytes in binary units, e.g. ``1.2 GiB``."""
    from .admin import human_size

    return human_size(size)


@dataclass(frozen=True)
class Verdict:
    """Whether an entry is written, and what to tell the user (None: nothing)."""

    keep: bool
    message: Optional[str] = None


def judge(key: str, size: int, limit: int, given: bool, directory: Path,
          room: Optional[int] = None) -> Verdict:
    """What to do with an entry of ``size`` bytes under ``limit`` (``given``: set by the
    user; else it follows the model and ``room`` is what the disk allows)."""
    kind = "to_executorch" if key.startswith("executorch:") else "lowering"
    what = f"the {kind} cache entry {key} ({human(size)})"
    need = human(FOLLOW * size)
    if given:
        where = f"the cache's size limit, {human(limit)}, set by {_SETTING}"
        advice = (f"set it to at least {need} ({FOLLOW}x the entry) or leave it unset (the "
                  "limit then follows the model)")
    else:
        where = (f"the cache's size limit, {human(limit)}: it follows the model ({FOLLOW}x "
                 f"its largest entry) but no further than the free disk space of {directory} "
                 f"allows")
        advice = f"free disk space there, or point {env.CACHE_DIR} at a disk with {need} free"
    if size > limit:
        return Verdict(False, f"fastlower: {what} was not stored in {directory}: it is larger "
                              f"than {where}, and storing it would evict every other entry "
                              f"and then itself; {advice}")
    if 2 * size > limit:
        return Verdict(True, f"fastlower: {what} takes more than half of {where}: a model's "
                             "lowering and to_executorch entries are of about the same size, "
                             "so each will evict the other and the next export misses; "
                             f"{advice}")
    return Verdict(True)


def raise_limit(store: Any, limit: int) -> None:
    """Makes ``limit`` the folder's limit (this connection's, and its setting) if it is
    larger than the one in force."""
    if limit > int(store.size_limit):
        store.reset("size_limit", limit)
