"""``fastlower cache info|clear``: the preprocess and lowering caches' shared folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..console import out
from .common import EXIT_OK, default_cache_dir


def cmd_cache(args: argparse.Namespace) -> int:
    """``fastlower cache info|clear [--only preprocess|lowering]`` over the cache folder
    (the preprocess cache and the lowering cache share it)."""
    from ..cache import admin

    folder = args.cache_dir or default_cache_dir()
    if args.action == "info":
        out(admin.info(folder).format([args.only] if args.only else admin.CACHES))
        return EXIT_OK
    if not Path(folder).exists():
        out(f"cache: {folder} is already empty")
        return EXIT_OK
    removed = admin.clear(folder, [args.only] if args.only else admin.CACHES)
    shown = ", ".join(f"{n} {name}" for name, n in removed.items())
    out(f"cache: removed {sum(removed.values())} entries from {folder} ({shown})")
    return EXIT_OK
