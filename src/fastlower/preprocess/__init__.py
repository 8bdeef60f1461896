"""Parallel preprocess on any executor, and a content-addressed cache of its results.

``fastlower.preprocess.options(...)`` (a context manager) or
``fastlower.preprocess.set_options(...)`` (process-wide) choose the workers, an
optional ``concurrent.futures.Executor``, the cache directory and its size,
cache verification and the progress bar; environment variables
(``FASTLOWER_WORKERS``, ``FASTLOWER_CACHE_DIR``, ``FASTLOWER_CACHE_SIZE``,
``FASTLOWER_CACHE_VERIFY``, ``FASTLOWER_PROGRESS``) apply to what is not set
in Python. Modules: ``configuration`` (the options), ``jobs`` (one partition's call),
``executors`` (serial, fork pool, any Executor), ``transport`` (programs for
an Executor), ``keys`` (the cache key), ``cache`` (the store), ``failures``
(typed errors), ``progress`` (the bar), ``partitions`` (what ``lowering/`` calls).
"""

from .cache import CacheWarning
from .failures import CacheVerificationError, PreprocessError, WorkerDiedError
from .configuration import PreprocessOptions, default_workers, options, set_options

__all__ = ["options", "set_options", "PreprocessOptions", "default_workers", "PreprocessError",
           "WorkerDiedError", "CacheVerificationError", "CacheWarning"]
