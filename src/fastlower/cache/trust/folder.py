"""Whether users other than this one can write a cache folder.

A folder that another user owns, or that its group or everyone may write (a
shared CI volume, a team directory, ``/tmp`` itself), holds what others put in
it. fastlower reads such a folder only with an explicitly given key: a key the
team shares and the writers are meant to hold. On systems without POSIX
ownership every folder counts as the user's own.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_DB = "cache.db"


def others_can_write(directory: Path) -> str:
    """Why others can write ``directory`` (or its database), or '' when only this user
    (and root) can; a folder that does not exist yet is the user's to create."""
    if os.name != "posix":
        return ""
    for path in (directory, directory / _DB):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if st.st_uid not in (os.geteuid(), 0):
            return f"{path} is owned by another user (uid {st.st_uid})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return ""
