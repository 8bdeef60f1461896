"""The lowering cache's settings: the preprocess cache's, plus one switch.

The lowering cache lives in the preprocess cache's folder and obeys its options
(``fastlower.preprocess.options(cache_dir=..., cache_size=..., verify=...,
cache_key_file=...)`` or ``FASTLOWER_CACHE_DIR`` / ``FASTLOWER_CACHE_SIZE`` /
``FASTLOWER_CACHE_VERIFY`` / ``FASTLOWER_CACHE_KEY_FILE``):
no folder, no cache. A size limit left unset follows the model (:mod:`.budget`).
``FASTLOWER_LOWERING_CACHE=0`` (or ``with
fastlower.cache.disabled():``) keeps the preprocess cache and turns this one off.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from .. import settings as env
from ..preprocess.configuration import resolve as resolve_preprocess

ENV_SWITCH = env.LOWERING_CACHE
_DISABLED: ContextVar[bool] = ContextVar("fastlower_lowering_cache_disabled", default=False)


@dataclass(frozen=True)
class LoweringCacheSettings:
    """The settings in force for one ``to_edge_transform_and_lower`` call."""

    directory: Optional[Path]  # None: the cache is off
    size_limit: int
    verify: bool
    key_file: Optional[Path] = None  # None: the user's own key (fastlower.cache.trust.secret)


def switched_off() -> bool:
    """Whether the lowering cache is off: inside :func:`disabled`, or by the environment."""
    return _DISABLED.get() or not env.lowering_cache()


def size_given() -> bool:
    """Whether the cache's size limit was set (the ``cache_size`` option or
    ``FASTLOWER_CACHE_SIZE``): a hard limit. Else it follows the model (:mod:`.budget`)."""
    from ..preprocess.configuration import current

    return current().cache_size is not None or env.cache_size() is not None


def resolve() -> LoweringCacheSettings:
    """The folder (None when off), size limit and verify flag for the call about to run."""
    opts = resolve_preprocess()
    directory = None if switched_off() else opts.cache_dir
    return LoweringCacheSettings(directory, opts.cache_size, opts.verify, opts.cache_key_file)


@contextmanager
def disabled() -> Iterator[None]:
    """No lowering-cache lookup or store inside the block (this thread / task only)."""
    token = _DISABLED.set(True)
    try:
        yield
    finally:
        _DISABLED.reset(token)
