"""The torch and ExecuTorch releases fastlower is tested with, checked before it lowers.

fastlower reimplements ExecuTorch's delegation and mirrors internals of both
(``to_backend``'s steps, torch.fx's partitioners, the program serializer), so a
release outside the tested series may lower differently without failing loudly.
Before its first lowering in a process fastlower compares the installed versions
with :data:`TESTED` and raises :class:`~fastlower.errors.UnsupportedVersionError`
naming both; ``FASTLOWER_ALLOW_UNTESTED_VERSIONS=1`` turns that into one warning
per process, for trying a new release at one's own risk.
"""

from __future__ import annotations

import functools
import re
import threading
import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Dict, List, Optional, Tuple

from .. import settings
from ..errors import UnsupportedVersionError

Series = Tuple[int, int]

# distribution -> (first tested series, first series past the tested ones)
TESTED: Dict[str, Tuple[Series, Series]] = {
    "torch": ((2, 13), (2, 14)),
    "executorch": ((1, 5), (1, 6)),
}

_WARNED = threading.Event()


@functools.lru_cache(maxsize=None)
def installed(dist: str) -> Optional[str]:
    """The installed version of ``dist`` (None when not installed)."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _series(text: str) -> Optional[Series]:
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def untested() -> List[str]:
    """One line per installed torch / ExecuTorch outside the tested series."""
    problems = []
    for dist, (first, past) in TESTED.items():
        found = installed(dist)
        series = _series(found) if found else None
        if series is None or not first <= series < past:
            tested = f"{first[0]}.{first[1]}.x"
            problems.append(f"{dist} {found or 'is not installed'} (fastlower is tested with "
                            f"{dist} {tested})")
    return problems


def check_versions() -> None:
    """Raises :class:`UnsupportedVersionError` for an untested torch or ExecuTorch, or warns
    once per process when ``FASTLOWER_ALLOW_UNTESTED_VERSIONS`` is set."""
    problems = untested()
    if not problems:
        return
    text = "; ".join(problems)
    if not settings.allow_untested_versions():
        raise UnsupportedVersionError(
            f"fastlower does not support the installed {text}. Install the tested releases, "
            f"or set {settings.ALLOW_UNTESTED_VERSIONS}=1 to lower anyway at your own risk.")
    if not _WARNED.is_set():
        _WARNED.set()
        warnings.warn(f"fastlower: lowering with an untested {text} "
                      f"({settings.ALLOW_UNTESTED_VERSIONS} is set)", RuntimeWarning, stacklevel=3)
