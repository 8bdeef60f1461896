"""``fastlower lower``: ``MODEL.pt2`` in, ``.pte`` out, the report printed."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..console import out, quiet_torch
from .check import check_pte
from .common import EXIT_OK, Steps, UsageError, check_workers, preprocess_settings, write_reports
from .inputs import check_model_file, load_program, make_partitioners


def cmd_lower(args: argparse.Namespace) -> int:
    """``fastlower lower``: ``.pt2`` in, ``.pte`` out, report printed."""
    check_model_file(args.model)
    check_workers(args.workers)
    for name in ("atol", "rtol"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name} must be >= 0, got {getattr(args, name)}")
    output = Path(args.output)
    if not output.parent.exists():
        raise UsageError(f"{args.output}: folder {output.parent} does not exist")
    quiet_torch(args.debug)
    import executorch.exir

    from ...patch import installed
    from ...report import json as report_json
    from ...report import last_report

    partitioners = make_partitioners(args.backend, args.partitioner)
    program = load_program(args.model, args.imports).program
    steps = Steps(["lower", "to_executorch", "write"] + (["check"] if args.check else []))
    try:
        start = time.perf_counter()
        # ExecuTorch's entry points, looked up inside installed(): fastlower's, with both caches
        with installed(), preprocess_settings(args):
            with steps.step("lower (to_edge_transform_and_lower)"):
                edge = executorch.exir.to_edge_transform_and_lower(program,
                                                                   partitioner=partitioners)
            report = last_report()
            with steps.step("to_executorch"):
                buffer = edge.to_executorch().buffer
        with steps.step("write"):
            report_json.write_atomic(output, bytes(buffer))
        total = time.perf_counter() - start
        out(f"wrote {output} ({len(buffer):,} bytes) in {total:.2f}s")
        if report is not None:
            out(report.summary())
            write_reports(report, args)
        status = EXIT_OK
        if args.check:
            with steps.step("check in executorch.runtime"):
                status = check_pte(program, bytes(buffer), atol=args.atol, rtol=args.rtol)
    finally:
        steps.close()
    return status
