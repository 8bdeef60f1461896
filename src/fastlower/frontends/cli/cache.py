"""``fastlower cache info|clear|push|pull``: the preprocess and lowering caches' folder,
and the shared store of lowering entries."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from ..console import out
from .common import EXIT_FAILED, EXIT_OK, UsageError, default_cache_dir


def cmd_cache(args: argparse.Namespace) -> int:
    """``fastlower cache info|clear [--only preprocess|lowering]`` over the cache folder
    (the preprocess cache and the lowering cache share it)."""
    from ...cache import admin

    folder = args.cache_dir or default_cache_dir()
    if args.action in ("push", "pull"):
        return shared_transfer(args.action, Path(folder), args.shared_cache)
    if args.action == "info":
        out(admin.info(folder).format([args.only] if args.only else admin.CACHES))
        shared = shared_settings(args.shared_cache)
        if shared is not None:
            from ...cache.shared.admin import describe

            out(describe(shared, Path(folder)))
        return EXIT_OK
    if not Path(folder).exists():
        out(f"cache: {folder} is already empty")
        return EXIT_OK
    removed = admin.clear(folder, [args.only] if args.only else admin.CACHES)
    shown = ", ".join(f"{n} {name}" for name, n in removed.items())
    out(f"cache: removed {sum(removed.values())} entries from {folder} ({shown})")
    return EXIT_OK


def shared_settings(url: Optional[str]) -> Any:
    """The shared store of ``--shared-cache`` (else the environment's), or None."""
    from ...cache.shared.configuration import options, resolve

    with options(url=url):
        return resolve()


def shared_transfer(action: str, folder: Path, url: Optional[str]) -> int:
    """``fastlower cache push|pull``: lowering entries from the folder to the store or back."""
    from ...preprocess.configuration import resolve as resolve_preprocess
    from ...cache.shared import admin as shared_admin
    from ...cache.shared.client import StoreUnavailable

    shared = shared_settings(url)
    if shared is None:
        raise UsageError(f"cache {action} needs a shared store: --shared-cache URL or "
                         "$FASTLOWER_SHARED_CACHE")
    opts = resolve_preprocess()
    move = shared_admin.push if action == "push" else shared_admin.pull
    try:
        counts = move(shared, folder, opts.cache_size, opts.cache_key_file)
    except (StoreUnavailable, OSError) as exc:
        sys.stderr.write(f"fastlower cache {action}: {exc}\n")
        return EXIT_FAILED
    where = f"{folder} -> {shared.url}" if action == "push" else f"{shared.url} -> {folder}"
    out(f"cache {action}: {where}: {counts.copied} copied, {counts.already_there} already "
        f"there, {len(counts.rejected)} rejected (do not verify with this folder's key)")
    for why in counts.rejected[:5]:
        out(f"  rejected {why}")
    return EXIT_OK
