"""``fastlower report``: what would be delegated, the partitioner only (no preprocess)."""

from __future__ import annotations

import argparse
from ..console import out, quiet_torch
from .common import EXIT_OK, Steps, write_reports
from .common import UsageError
from .inputs import check_model_file, load_program, make_partitioners


def cmd_report(args: argparse.Namespace) -> int:
    """``fastlower report``: the partitioner only, no backend preprocess."""
    check_model_file(args.model)
    quiet_torch(args.debug)
    from ..preview import preview_export

    partitioners = make_partitioners(args.backend, args.partitioner)
    if len(partitioners) != 1:
        raise UsageError(f"report previews one partitioner, got {len(partitioners)}: lower with "
                         "all of them and read its report (fastlower lower --report-html)")
    partitioner = partitioners[0]
    program = load_program(args.model, args.imports).program
    steps = Steps(["partition"])
    try:
        with steps.step("partition (no preprocess)"):
            report = preview_export(program, partitioner)
    finally:
        steps.close()
    out(report.summary())
    write_reports(report, args)
    return EXIT_OK
