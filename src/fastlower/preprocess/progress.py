"""A progress bar over partitions: on a terminal, or when asked; never in CI logs."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


@lru_cache(maxsize=None)
def _bar_class() -> Any:
    """tqdm without its monitor thread, for fastlower's bars only.

    The monitor thread could hold a lock while worker processes fork; setting
    ``tqdm.monitor_interval = 0`` would turn it off for every bar of the process,
    so the setting is a class attribute of fastlower's own subclass instead.
    """
    from tqdm import tqdm

    class PartitionBar(tqdm):
        monitor_interval = 0

    return PartitionBar


@contextmanager
def partition_bar(total: int, enabled: bool) -> Iterator[Any]:
    """A tqdm bar counting preprocessed partitions, or a no-op bar when not ``enabled``."""
    if not enabled or total <= 1:
        yield _NoBar()
        return
    bar = _bar_class()(total=total, desc="preprocess", unit="partition", file=sys.stderr,
                       leave=False, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
