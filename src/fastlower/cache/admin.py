"""``fastlower cache info|clear`` as library functions, over both caches of one folder.

The preprocess cache (``fastlower.preprocess``: one entry per partition) and the
lowering cache (``fastlower.cache``: one entry per ``to_edge_transform_and_lower``
/ ``to_executorch`` call) share a ``diskcache`` folder and its size limit.
:func:`info` counts each (entries and bytes, read from diskcache's index without
opening a value); :func:`clear` empties one or both.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union

import diskcache

from .trust.disk import BytesOnlyDisk
from .names import TAG

CACHES = ("preprocess", "lowering")


@dataclass
class CacheUsage:
    """One cache's share of the folder."""

    entries: int = 0
    bytes: int = 0


@dataclass
class CacheInfo:
    """What a cache folder holds."""

    directory: Path
    exists: bool
    preprocess: CacheUsage
    lowering: CacheUsage
    size_limit: Optional[int] = None  # diskcache's setting, None when the folder is new

    @property
    def entries(self) -> int:
        return self.preprocess.entries + self.lowering.entries

    @property
    def bytes(self) -> int:
        return self.preprocess.bytes + self.lowering.bytes

    def format(self, caches: Iterable[str] = CACHES) -> str:
        """A few lines for a terminal (the named caches' lines, and the total)."""
        if not self.exists:
            return f"cache: {self.directory} (empty: the folder does not exist yet)"
        lines = [f"cache: {self.directory}"]
        for name in caches:
            usage: CacheUsage = getattr(self, name)
            lines.append(f"{name} cache: {usage.entries} entries, {human_size(usage.bytes)}")
        limit = f" of {human_size(self.size_limit)}" if self.size_limit else ""
        lines.append(f"total: {self.entries} entries, {human_size(self.bytes)}{limit}")
        return "\n".join(lines)


def human_size(size: int) -> str:
    """``size`` bytes in binary units, e.g. ``40.0 KiB``, ``2.0 GiB``."""
    if size < 1024:
        return f"{size} bytes"
    value, unit = size / 1024, "KiB"
    for larger in ("MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit}"


def default_directory() -> Path:
    """The folder the caches use now: the preprocess option / ``FASTLOWER_CACHE_DIR``,
    else the user's cache folder for fastlower (``platformdirs``), as the CLI."""
    from ..preprocess.configuration import resolve

    folder = resolve().cache_dir
    if folder is not None:
        return folder
    import platformdirs

    return Path(platformdirs.user_cache_dir("fastlower"))


def info(directory: Optional[Union[str, os.PathLike]] = None) -> CacheInfo:
    """Entries and bytes of each cache in ``directory`` (default: :func:`default_directory`)."""
    folder = Path(directory).expanduser() if directory is not None else default_directory()
    result = CacheInfo(folder, False, CacheUsage(), CacheUsage())
    db = folder / "cache.db"
    if not db.exists():
        return result
    result.exists = True
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        # the lowering cache's entries (to_edge_transform_and_lower's and to_executorch's)
        # carry its tag; the preprocess cache's none
        rows = connection.execute(
            # a value stored in the database itself (diskcache keeps small ones there) has
            # size 0: count its own length
            "SELECT tag IS ? AS lowering, COUNT(*), COALESCE(SUM(CASE WHEN filename IS NULL "
            "THEN COALESCE(length(value), 0) ELSE size END), 0) FROM Cache GROUP BY lowering",
            (TAG,)).fetchall()
        for lowering, count, size in rows:
            usage = result.lowering if lowering else result.preprocess
            usage.entries, usage.bytes = int(count), int(size)
        found = connection.execute(
            "SELECT value FROM Settings WHERE key = 'size_limit'").fetchone()
        result.size_limit = int(found[0]) if found else None
    finally:
        connection.close()
    return result


def clear(directory: Optional[Union[str, os.PathLike]] = None,
          caches: Iterable[str] = CACHES) -> Dict[str, int]:
    """Empties the named caches (default both) in ``directory``; entries removed per cache."""
    wanted = set(caches)
    unknown = wanted - set(CACHES)
    if unknown:
        raise ValueError(f"unknown cache(s) {sorted(unknown)}; the caches are {list(CACHES)}")
    folder = Path(directory).expanduser() if directory is not None else default_directory()
    removed = {name: 0 for name in CACHES if name in wanted}
    if not (folder / "cache.db").exists():
        return removed
    with diskcache.Cache(str(folder), disk=BytesOnlyDisk) as cache:
        if wanted == set(CACHES):
            before = info(folder)
            cache.clear(retry=True)
            removed.update(preprocess=before.preprocess.entries, lowering=before.lowering.entries)
        elif "lowering" in wanted:
            removed["lowering"] = cache.evict(TAG, retry=True)
        else:
            for key in _untagged_keys(folder):
                removed["preprocess"] += int(cache.delete(key, retry=True))
    return removed


def _untagged_keys(folder: Path) -> List[object]:
    """The preprocess cache's keys (entries without the lowering cache's tag; a key that
    is not a string or bytes, pickled by another tool, is never unpickled: left alone)."""
    return [bytes(key) if isinstance(key, memoryview) else key
            for key in _raw_keys(folder, lowering=False)]


def lowering_keys(folder: Path) -> List[str]:
    """The keys of the lowering entries in ``folder`` (read-only; none if no database)."""
    return [key for key in _raw_keys(folder, lowering=True) if isinstance(key, str)]


def _raw_keys(folder: Path, lowering: bool) -> List[object]:
    """Keys stored as they are (``raw``), of lowering entries or of the others; the
    database is opened read-only and never unpickles anything."""
    db = folder / "cache.db"
    if not db.exists():
        return []
    which = "tag = ?" if lowering else "tag IS NOT ?"
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = connection.execute(f"SELECT key FROM Cache WHERE {which} AND raw = 1",
                                  (TAG,)).fetchall()
    finally:
        connection.close()
    return [key for (key,) in rows]
