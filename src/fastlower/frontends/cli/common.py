"""What every ``fastlower`` subcommand shares: exit codes, the usage error, the
``--workers`` / ``--cache-dir`` / ``--no-cache`` settings, the step progress bar and
the report files."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ContextManager, Iterator, Optional, Sequence

from ... import settings
from ..console import out

log = logging.getLogger("fastlower.frontends.cli")

#: the cache folder's environment variable (read, never written: the default folder)
ENV_CACHE_DIR = settings.CACHE_DIR

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_MISMATCH = 3  # lower --check: the .pte's output differs from the program's


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


def check_workers(workers: Optional[int]) -> None:
    """``--workers`` must be a positive count."""
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be >= 1, got {workers}")


# --------------------------------------------------------------------------- progress
class Steps:
    """A tqdm bar over the command's steps, shown only when stderr is a terminal."""

    def __init__(self, names: Sequence[str]) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=len(names), disable=not sys.stderr.isatty(), leave=False,
                        bar_format="{desc} [{n}/{total}] {elapsed}", file=sys.stderr)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.bar.set_description_str(name)
        start = time.perf_counter()
        yield
        log.info("%s: %.2fs", name, time.perf_counter() - start)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


# --------------------------------------------------------------------------- cache settings
def default_cache_dir() -> str:
    """``$FASTLOWER_CACHE_DIR``, else the user's cache folder for fastlower."""
    import platformdirs

    folder = settings.cache_dir()
    return str(folder) if folder is not None else platformdirs.user_cache_dir("fastlower")


def cache_dir_for(args: argparse.Namespace) -> Optional[str]:
    """The preprocess cache folder of a command: ``--cache-dir``, else the default folder;
    None with ``--no-cache``."""
    if args.no_cache:
        return None
    return args.cache_dir or default_cache_dir()


def preprocess_settings(args: argparse.Namespace) -> ContextManager[Any]:
    """``--workers``/``--cache-dir``/``--no-cache`` (and ``--shared-cache``) as a
    ``fastlower.preprocess.options()`` (and ``fastlower.cache.shared.options()``) block for the
    lowering (an empty ``cache_dir`` is no cache, whatever
    ``FASTLOWER_CACHE_DIR`` says)."""
    import contextlib

    from ...preprocess import options
    from ...cache.shared.configuration import options as shared_options

    stack = contextlib.ExitStack()
    stack.enter_context(options(workers=args.workers, cache_dir=cache_dir_for(args) or ""))
    stack.enter_context(shared_options(url=getattr(args, "shared_cache", None)))
    return stack


def write_reports(report: Any, args: argparse.Namespace) -> None:
    """The ``--report-json`` / ``--report-html`` / ``--explorer-json`` files asked for."""
    from ...report import explorer, html, json as report_json

    if args.report_json:
        report_json.write(report, args.report_json)
        out(f"report (JSON): {args.report_json}")
    if args.report_html:
        html.write(report, args.report_html, title=Path(args.model).name)
        out(f"report (HTML): {args.report_html}")
    if getattr(args, "explorer_json", None):
        explorer.write(report, args.explorer_json)
        out(f"Model Explorer overlay: {args.explorer_json}")
