"""A progress bar over partitions: on a terminal, or when asked; never in CI logs."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


@contextmanager
def partition_bar(total: int, enabled: bool) -> Iterator[object]:
    """A tqdm bar counting preprocessed partitions, or a no-op bar when not ``enabled``."""
    if not enabled or total <= 1:
        yield _NoBar()
        return
    from tqdm import tqdm

    # no monitor thread: it could hold a lock while worker processes fork
    tqdm.monitor_interval = 0
    bar = tqdm(total=total, desc="preprocess", unit="partition", file=sys.stderr, leave=False,
               dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
