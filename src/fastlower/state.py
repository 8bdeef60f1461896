"""Process-wide switches, mirroring ``backend_api``'s ``_ENABLE_VALIDATION``."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Generator

_ENABLE_VALIDATION: bool = True


def validation_enabled() -> bool:
    return _ENABLE_VALIDATION


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


_STRICT_TAGS: bool = False


def strict_tags_enabled() -> bool:
    return _STRICT_TAGS


@contextmanager
def strict_tags() -> Generator[None, None, None]:
    """Inside the block a node tagged with a tag missing from ``partition_tags`` is an error.

    By default such nodes are left undelegated with a warning, as the reference
    does (ExecuTorch's own nested-backend tests rely on it).
    """
    global _STRICT_TAGS
    existing = _STRICT_TAGS
    _STRICT_TAGS = True
    try:
        yield
    finally:
        _STRICT_TAGS = existing
