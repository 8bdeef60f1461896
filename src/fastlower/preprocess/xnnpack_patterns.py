"""Deprecated path: XNNPACK's patterns moved to :mod:`fastlower.in_process.xnnpack_patterns`
(what fastlower changes in your process); its public names are re-exported here."""

from ..in_process.xnnpack_patterns import (  # noqa: F401
    PASSES, PATCHES, matchable, skipped_when_absent, uninstall,
)
