"""``fastlower cache info|push|pull`` for the shared store.

* :func:`describe`: the store's lowering entries and bytes (a listing), and the last
  runs' hits, misses and uploads recorded in the local folder (:mod:`.stats`).
* :func:`push`: every lowering entry of the local folder that verifies under the
  folder's key, copied to the store (a conditional put: entries already there stay).
* :func:`pull`: every store entry missing from the local folder, copied into it when
  its MAC verifies under the folder's key (checked before anything but the entry's
  plain-data header is decoded; one that does not verify is skipped and counted).

Eviction is the store's own business (an S3 lifecycle rule, a cron job on the
directory): entries are immutable, and a missing one is a miss.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, List, Optional

from . import stats
from ..admin import lowering_keys
from .client import StoreClient, StoreUnavailable
from .configuration import SharedSettings


@dataclass
class TransferCounts:
    """What a push or pull did."""

    copied: int = 0
    already_there: int = 0
    rejected: List[str] = field(default_factory=list)  # entries that do not verify


def _human(size: int) -> str:
    from ..admin import human_size

    return human_size(size)


def describe(shared: SharedSettings, folder: Path) -> str:
    """Lines for ``fastlower cache info``: the store's entries and the last runs."""
    lines = []
    try:
        found = list(StoreClient(shared).entries())
        total = sum(size for _, size in found)
        records = sum(1 for key, _ in found if key.startswith("structure:"))
        lines.append(f"shared cache: {shared.url}: {len(found) - records} lowering entries"
                     f"{f' (+{records} structure records)' if records else ''}, "
                     f"{_human(total)}")
    except StoreUnavailable as exc:
        lines.append(f"shared cache: {shared.url}: cannot be listed ({exc})")
    runs = [r for r in stats.last_runs(folder) if r.get("url") == shared.url]
    for run in runs[-5:]:
        failures: Any = run.get("failures") or []
        lines.append(f"  run (pid {run.get('pid')}): {run.get('hits', 0)} hits, "
                     f"{run.get('misses', 0)} misses, {run.get('uploaded', 0)} uploaded, "
                     f"{run.get('already_there', 0)} already there"
                     + (f", failed: {failures[0]}" if failures else ""))
    if not runs:
        lines.append("  no run recorded in this folder")
    return "\n".join(lines)


def _verifies(store: Any, key: str, stream: BinaryIO) -> Optional[str]:
    """Why the entry in ``stream`` does not verify under ``store``'s key (None: it does).
    Only the entry's header (plain data) is decoded, after its MAC verified."""
    from .. import entry

    try:
        next(entry.read(stream, store.seal(key)))
    except Exception as exc:
        return repr(exc)
    return None


def _verified(store: Any, key: str, stream: BinaryIO, counts: "TransferCounts") -> bool:
    """Whether the entry in ``stream`` verifies (then rewound); if not, recorded as
    rejected in ``counts``."""
    why = _verifies(store, key, stream)
    if why is not None:
        counts.rejected.append(f"{key}: {why}")
        return False
    stream.seek(0)
    return True


def _open_local(folder: Path, size_limit: int, key_file: Optional[Path]) -> Any:
    from ..store import LoweringStore

    return LoweringStore(folder, size_limit, key_file)


def push(shared: SharedSettings, folder: Path, size_limit: int,
         key_file: Optional[Path] = None) -> TransferCounts:
    """Copies the local folder's lowering entries to the store; raises
    :class:`StoreUnavailable` when the store cannot be used."""
    client = StoreClient(shared)
    counts = TransferCounts()
    local = _open_local(folder, size_limit, key_file)
    try:
        for key in lowering_keys(folder):
            stream = local.open(key)
            if stream is None:
                continue
            with stream:
                if not _verified(local, key, stream, counts):
                    continue
                if client.upload(key, stream.read() if _small(stream) else stream, False):
                    counts.copied += 1
                else:
                    counts.already_there += 1
    finally:
        local.close()
    return counts


def _small(stream: Any) -> bool:
    import io

    return isinstance(stream, io.BytesIO)


def pull(shared: SharedSettings, folder: Path, size_limit: int,
         key_file: Optional[Path] = None) -> TransferCounts:
    """Copies the store's entries that the local folder lacks into it; raises
    :class:`StoreUnavailable` when the store cannot be used."""
    client = StoreClient(shared)
    counts = TransferCounts()
    local = _open_local(folder, size_limit, key_file)
    try:
        if local.read_only:
            raise PermissionError(f"the cache folder {folder} is read-only")
        have = set(lowering_keys(folder))
        for key, _size in client.entries():
            if key in have:
                counts.already_there += 1
                continue
            with tempfile.TemporaryFile(dir=folder, buffering=0) as spool:
                if not client.download(key, spool):
                    continue
                spool.seek(0)
                if not _verified(local, key, spool, counts):
                    continue
                local.put(key, spool)
                counts.copied += 1
    finally:
        local.close()
    return counts
