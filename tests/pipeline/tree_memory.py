"""Peak memory of a process and of every process under it, sampled from outside.

A process's own peak (``ru_maxrss``) misses its children; summing the children's
RSS counts the pages a fork shares copy-on-write once per process. The
proportional set size (``Pss`` in ``/proc/PID/smaps_rollup``: each page divided by
the number of processes mapping it) sums to the tree's real footprint, each page
counted once. :class:`TreeSampler` reads it for the process and its descendants
(``/proc/PID/task/TID/children``) every ``interval`` seconds, from a thread of the
*calling* process: the measured process runs no extra thread (fastlower's fork pool
forks only when no other Python thread is alive, so a sampler inside it would change
what it measures).

Linux only; a peak between two samples is missed, so the figures are lower bounds
(the root process's exact peak is its own ``ru_maxrss``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Dict, List, Optional, Tuple


def descendants(pid: int) -> List[int]:
    """``pid`` and every process under it (those that exist at this moment)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(child) for child in f.read().split())
            except OSError:
                continue
    return found


def rollup(pid: int) -> Optional[Dict[str, int]]:
    """``Rss`` and ``Pss`` of ``pid`` in bytes, or None when it has gone."""
    values = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("Rss", "Pss"):
                    values[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        return None
    return values if len(values) == 2 else None


class TreeSampler:
    """Samples a process tree's memory until :meth:`stop`; peaks and a timeline in bytes."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_tree_pss = 0
        self.peak_root_rss = 0
        self.peak_processes = 0
        # (seconds since start, root RSS, tree PSS, processes)
        self.timeline: List[Tuple[float, int, int, int]] = []
        self._stop = threading.Event()
        self._start = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)

    def __enter__(self) -> "TreeSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        root_rss, tree_pss, processes = 0, 0, 0
        for pid in descendants(self.pid):
            values = rollup(pid)
            if values is None:
                continue
            processes += 1
            tree_pss += values["Pss"]
            if pid == self.pid:
                root_rss = values["Rss"]
        if not processes:
            return
        self.peak_tree_pss = max(self.peak_tree_pss, tree_pss)
        self.peak_root_rss = max(self.peak_root_rss, root_rss)
        self.peak_processes = max(self.peak_processes, processes)
        self.timeline.append((round(time.perf_counter() - self._start, 2), root_rss, tree_pss,
                              processes))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)
