"""``fastlower report``: what would be delegated, the partitioner only (no preprocess)."""

from __future__ import annotations

import argparse
from ..console import out, quiet_torch
from .common import EXIT_OK, Steps, write_reports
from .inputs import check_model_file, load_program, make_partitioner


def cmd_report(args: argparse.Namespace) -> int:
    """``fastlower report``: the partitioner only, no backend preprocess."""
    check_model_file(args.model)
    quiet_torch(args.debug)
    from ..preview import preview_export

    partitioner = make_partitioner(args.backend, args.partitioner)
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
