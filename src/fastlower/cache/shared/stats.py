"""What the shared store did for this process, and for the last runs.

Each process counts its shared-store hits, misses, uploads and failures per local
folder; at exit the counts are appended to ``shared-runs.json`` in that folder (the
last :data:`KEEP` runs, written to a temporary name and renamed over the file), which
``fastlower cache info`` shows. The file is statistics only: nothing else reads it,
and a damaged one is started anew.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List

FILE = "shared-runs.json"
KEEP = 10


@dataclass
class RunCounts:
    """One process's dealings with one shared store, through one local folder."""

    url: str
    hits: int = 0
    misses: int = 0
    uploaded: int = 0
    already_there: int = 0
    failures: List[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)


_LOCK = threading.Lock()
_RUNS: Dict[Path, RunCounts] = {}


def counts(folder: Path, url: str) -> RunCounts:
    """This process's counts for ``folder`` (created at first use)."""
    with _LOCK:
        found = _RUNS.get(folder)
        if found is None or found.url != url:
            found = _RUNS[folder] = RunCounts(url)
        return found


def note(folder: Path, url: str, what: str, detail: str = "") -> None:
    """Adds one to ``what`` (``hits``, ``misses``, ``uploaded``, ``already_there``) or, for
    ``failures``, records ``detail``."""
    run = counts(folder, url)
    with _LOCK:
        if what == "failures":
            run.failures.append(detail[:300])
        else:
            setattr(run, what, getattr(run, what) + 1)


def last_runs(folder: Path) -> List[Dict[str, object]]:
    """The runs recorded in ``folder``, oldest first (empty when none or unreadable)."""
    try:
        runs = json.loads((Path(folder) / FILE).read_text())
    except (OSError, ValueError):
        return []
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def save_all() -> None:
    """Appends this process's counts to each folder's file (at exit)."""
    with _LOCK:
        runs = dict(_RUNS)
        _RUNS.clear()
    for folder, run in runs.items():
        _append(folder, dict(asdict(run), finished=time.time(), pid=os.getpid()))


def _append(folder: Path, run: Dict[str, object]) -> None:
    if not folder.is_dir():
        return
    runs = (last_runs(folder) + [run])[-KEEP:]
    try:
        fd, temporary = tempfile.mkstemp(prefix=".shared-runs-", dir=folder)
    except OSError:  # a read-only folder: no statistics
        return
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(runs, handle)
        os.replace(temporary, folder / FILE)
    except OSError:
        pass
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
