"""``fastlower run``: an unchanged script or module, fastlower installed
(``fastlower.frontends.script_runner``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import UsageError, cache_dir_for, check_workers


def cmd_run(args: argparse.Namespace) -> int:
    """``fastlower run``: an unchanged script or module, fastlower installed
    (``fastlower.frontends.script_runner``)."""
    if args.module is None and not args.script:
        raise UsageError("give a script (fastlower run SCRIPT.py ARGS...) or a module "
                         "(fastlower run -m MODULE ARGS...)")
    if args.module is not None:
        if not args.module:
            raise UsageError("-m needs a module name")
        parts = args.module + args.script  # "-mpkg a b": argparse splits after the module
        target, script_args, module = parts[0], parts[1:], True
    else:
        target, script_args, module = args.script[0], args.script[1:], False
        if not Path(target).exists():  # a file, or a folder or zip with __main__.py, as python
            raise UsageError(f"{target}: no such file")
    for option in ("report_json", "report_html"):
        pattern = getattr(args, option)
        if pattern and not Path(pattern).parent.exists():
            raise UsageError(f"{pattern}: folder {Path(pattern).parent} does not exist")
    check_workers(args.workers)
    from ..script_runner import RunSettings, run

    if args.shared_cache is not None:  # this process is the script's: process-wide
        from ...cache.shared.configuration import set_options

        set_options(url=args.shared_cache)

    result = run(target, script_args, module=module, settings=RunSettings(
        workers=args.workers, cache_dir=cache_dir_for(args),
        report_json=args.report_json, report_html=args.report_html))
    # on stderr: stdout is the script's
    if args.report_json or args.report_html:
        if result.written:
            sys.stderr.write(f"fastlower run: {len(result.reports)} lowering(s), reports: "
                             + ", ".join(map(str, result.written)) + "\n")
        else:
            sys.stderr.write("fastlower run: the script made no lowering: no report written\n")
    return result.exit_code
