"""Switches: validation (process-wide, as the reference's) and strictness (per context)."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generator

_ENABLE_VALIDATION: bool = True


def validation_enabled() -> bool:
    """Whether the partitioner check runs: neither fastlower's switch nor the reference's
    (``backend_api.disable_validation()`` / ``validation_disabled()``, which ExecuTorch's
    own ``executorch.export`` stages use) turned it off."""
    from executorch.exir.backend import backend_api

    return _ENABLE_VALIDATION and bool(getattr(backend_api, "_ENABLE_VALIDATION", True))


def disable_validation() -> None:
    """Disables validation (the partitioner-did-not-modify-the-graph check)."""
    global _ENABLE_VALIDATION
    _ENABLE_VALIDATION = False


@contextmanager
def validation_disabled() -> Generator[None, None, None]:
    """Disables validation inside the block, restoring the previous setting after it."""
    global _ENABLE_VALIDATION
    existing = _ENABLE_VALIDATION
    disable_validation()
    try:
        yield
    finally:
        _ENABLE_VALIDATION = existing


# Per context (thread, asyncio task): one lowering's strictness never leaks into another's.
_STRICT_TAGS: ContextVar[bool] = ContextVar("fastlower_strict_tags", default=False)
_STRICT_PARTITIONERS: ContextVar[bool] = ContextVar("fastlower_strict_partitioners", default=False)


def strict_tags_enabled() -> bool:
    return _STRICT_TAGS.get()


@contextmanager
def strict_tags() -> Generator[None, None, None]:
    """Inside the block a node tagged with a tag missing from ``partition_tags`` is an error.

    By default such nodes are left undelegated with a warning, as the reference
    does (ExecuTorch's own nested-backend tests rely on it).
    """
    token = _STRICT_TAGS.set(True)
    try:
        yield
    finally:
        _STRICT_TAGS.reset(token)


def strict_partitioners_enabled() -> bool:
    return _STRICT_PARTITIONERS.get()


@contextmanager
def strict_partitioners() -> Generator[None, None, None]:
    """Inside the block a partitioner that changes any node argument is an error.

    By default such an edit is lowered as the reference lowers it (the reference
    does not see it), with a warning naming each edit, and ExecuTorch's verifier
    runs on every partition that holds an edited node. Inside the block the
    edit raises :class:`fastlower.errors.PartitionerEditError` (a
    ``GraphModifiedError``, an ``AssertionError`` as the reference's check),
    naming the node, the argument and the old and new values.
    """
    token = _STRICT_PARTITIONERS.set(True)
    try:
        yield
    finally:
        _STRICT_PARTITIONERS.reset(token)
