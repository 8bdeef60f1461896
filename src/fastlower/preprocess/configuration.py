"""How preprocess runs: workers, executor, cache; set in Python or by environment variables.

``to_backend`` mirrors the reference's signature, so it takes no new arguments.
The settings live here instead, beside ``fastlower.strict_tags()``:

.. code-block:: python

    with fastlower.preprocess.options(workers=4, cache_dir="~/.cache/fastlower"):
        fastlower.to_backend(program, partitioner)

A setting left ``None`` falls back to its environment variable, then to the default
(the variables are parsed by :mod:`fastlower.settings`, one rule for all; a bad value
raises ``fastlower.settings.SettingsError``, a ``ValueError``):

=================  ==========================  =========================================
option             environment variable        default
=================  ==========================  =========================================
``workers``        ``FASTLOWER_WORKERS=N``     usable cores (``os.sched_getaffinity``) on
                                               Linux, 1 (serial) elsewhere
``executor``       (none)                      fastlower's fork pool of ``workers``
                                               processes
``cache_dir``      ``FASTLOWER_CACHE_DIR=DIR`` no cache
``cache_size``     ``FASTLOWER_CACHE_SIZE=B``  2 GiB (bytes; least-recently-used eviction)
``verify``         ``FASTLOWER_CACHE_VERIFY=1`` off: a hit is trusted
``cache_key_file`` ``FASTLOWER_CACHE_KEY_FILE`` the user's own key (``fastlower.cache.trust``)
``progress``       ``FASTLOWER_PROGRESS=1|0``  a bar only when stderr is a terminal
``start_method``   ``FASTLOWER_START_METHOD``  ``auto``: ``fork`` when the calling process
                                               runs no other Python thread, else ``spawn``
``classes``        ``FASTLOWER_PREPROCESS_     ``derive``: partitions of one structure are
                   CLASSES``                   derived from two real preprocesses
                                               (``verify``: all run and are compared;
                                               ``off``: all run)
=================  ==========================  =========================================
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import Executor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Union

from .. import settings as env

DEFAULT_CACHE_SIZE = 2 * 1024 ** 3
START_METHODS = env.START_METHODS


@dataclass(frozen=True)
class PreprocessOptions:
    """Preprocess settings; ``None`` means: the environment variable, else the default."""

    workers: Optional[int] = None
    executor: Optional[Executor] = None
    cache_dir: Optional[Union[str, Path]] = None
    cache_size: Optional[int] = None
    verify: Optional[bool] = None
    progress: Optional[bool] = None
    start_method: Optional[str] = None
    cache_key_file: Optional[Union[str, Path]] = None
    classes: Optional[str] = None


_CURRENT = PreprocessOptions()  # process-wide (set_options)
# inside an options() block: that block's settings, for this thread / context only
_SCOPED: ContextVar[Optional[PreprocessOptions]] = ContextVar("fastlower_preprocess_options",
                                                             default=None)


def default_workers() -> int:
    """The usable cores on Linux; 1 (serial) on other systems."""
    if sys.platform.startswith("linux") and hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return 1


@dataclass(frozen=True)
class ResolvedOptions:
    """The settings in force for one lowering, environment and defaults applied."""

    workers: int
    executor: Optional[Executor]
    cache_dir: Optional[Path]
    cache_size: int
    verify: bool
    progress: bool
    start_method: str = "auto"
    cache_key_file: Optional[Path] = None  # None: the user's own key
    classes: str = "derive"


def resolve() -> ResolvedOptions:
    """The settings for the lowering about to run."""
    opts = current()
    # each environment variable is read (and checked) only when its option is unset
    workers = opts.workers
    if workers is None:
        workers = env.workers() or default_workers()
    if workers < 1:
        raise ValueError(f"preprocess workers must be >= 1, got {workers}")
    cache_dir = opts.cache_dir if opts.cache_dir is not None else env.cache_dir()
    cache_size = opts.cache_size
    if cache_size is None:
        size_from_env = env.cache_size()
        cache_size = DEFAULT_CACHE_SIZE if size_from_env is None else size_from_env
    verify = opts.verify if opts.verify is not None else env.cache_verify()
    progress = opts.progress
    if progress is None:
        bar_from_env = env.progress()
        progress = sys.stderr.isatty() if bar_from_env is None else bar_from_env
    start_method = (opts.start_method or env.start_method() or "auto").lower()
    if start_method not in START_METHODS:
        raise ValueError(f"preprocess start_method must be one of {START_METHODS}, "
                         f"got {start_method!r}")
    key_file = opts.cache_key_file if opts.cache_key_file is not None else env.cache_key_file()
    return ResolvedOptions(
        workers=workers, executor=opts.executor,
        cache_dir=Path(cache_dir).expanduser() if cache_dir else None,
        cache_size=cache_size, verify=verify, progress=progress, start_method=start_method,
        cache_key_file=Path(key_file).expanduser() if key_file else None,
        classes=_classes(opts.classes))


def _classes(given: Optional[str]) -> str:
    mode = (given or env.preprocess_classes()).lower()
    if mode not in env.CLASS_MODES:
        raise ValueError(f"preprocess classes must be one of {env.CLASS_MODES}, got {given!r}")
    return mode


def current() -> PreprocessOptions:
    """The options set in Python (not yet merged with the environment): the innermost
    ``options()`` block of this thread, else the process-wide ones."""
    scoped = _SCOPED.get()
    return scoped if scoped is not None else _CURRENT


def set_options(**changes) -> None:
    """Changes the process-wide options (the same keywords as :func:`options`); an
    ``options()`` block in progress keeps its own settings."""
    global _CURRENT
    _CURRENT = replace(_CURRENT, **changes)


@contextmanager
def options(*, workers: Optional[int] = None, executor: Optional[Executor] = None,
            cache_dir: Optional[Union[str, Path]] = None, cache_size: Optional[int] = None,
            verify: Optional[bool] = None, progress: Optional[bool] = None,
            start_method: Optional[str] = None,
            cache_key_file: Optional[Union[str, Path]] = None,
            classes: Optional[str] = None) -> Iterator[PreprocessOptions]:
    """Preprocess settings inside the block; the previous ones are restored after it.

    Only the keywords given change; ``None`` keeps the setting as it was.
    ``workers=1`` is serial. ``executor`` is any ``concurrent.futures.Executor``
    (for example ``distributed.Client(...).get_executor()``); partition programs
    are then sent to it serialized. ``cache_dir`` turns the content-addressed
    cache of preprocess results on; ``verify=True`` re-runs ``preprocess`` on
    every hit and raises if the result differs. ``start_method`` says how
    fastlower's own pool starts its workers: ``"fork"`` (fast: programs are
    inherited, not serialized), ``"spawn"`` (fresh interpreters, programs sent
    serialized; safe whatever other threads run) or ``"auto"`` (the default: fork
    when no other Python thread is alive in the process, else spawn).
    ``cache_key_file`` names the file holding the key that signs cache entries
    (default: the user's own, generated on first use; see ``fastlower.cache.trust``).
    ``classes`` says what happens to partitions of one structure
    (``fastlower.preprocess.structure``):
    ``"derive"`` (two are preprocessed, the others derived), ``"verify"`` (all are
    preprocessed and compared with what was derived) or ``"off"``.

    The block's settings hold for the calling thread (context) only: lowerings in
    other threads keep theirs.
    """
    requested: Dict[str, object] = dict(
        workers=workers, executor=executor, cache_dir=cache_dir, cache_size=cache_size,
        verify=verify, progress=progress, start_method=start_method,
        cache_key_file=cache_key_file, classes=classes)
    given: Dict[str, Any] = {k: v for k, v in requested.items() if v is not None}
    scoped = replace(current(), **given)
    token = _SCOPED.set(scoped)
    try:
        yield scoped
    finally:
        _SCOPED.reset(token)
