"""The report as plain-text tables for a log or a terminal (``tabulate``)."""

from __future__ import annotations

from typing import List

from tabulate import tabulate

from .model import ReportData, refit_line

#: partitions / operators / left-out nodes listed in full up to this many rows
MAX_ROWS = 15


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def _size(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _more(rows: list, total: int, what: str) -> List[str]:
    return [f"  ... {total - len(rows)} more {what} (see the JSON or HTML report)"] \
        if total > len(rows) else []


def summary(report: ReportData, max_rows: int = MAX_ROWS) -> str:
    """Coverage (overall and per backend), partitions, operators left out, and time."""
    lines: List[str] = []
    cov = report.coverage
    rows = [["all backends", f"{cov.delegated_nodes}/{cov.total_nodes}", _pct(cov.node_share),
             f"{cov.delegated_ops}/{cov.total_ops}", _pct(cov.op_share),
             sum(report.partitions.values())]]
    for backend, c in report.coverage_by_backend().items():
        rows.append([backend, f"{c.delegated_nodes}/{c.total_nodes}", _pct(c.node_share),
                     f"{c.delegated_ops}/{c.total_ops}", _pct(c.op_share),
                     report.partitions.get(backend, 0)])
    title = "delegation preview (partitioner only)" if report.preview else "delegation"
    lines.append(f"{title}: {', '.join(report.methods) or '-'}")
    lines += [f"note: {note}" for note in report.notes]
    lines.append(tabulate(rows, headers=["backend", "nodes", "", "operators", "", "partitions"],
                          tablefmt="simple"))
    parts = report.partition_records
    if parts:
        shown = sorted(parts, key=lambda p: -p.node_count)[:max_rows]
        headers = ["partition", "backend", "nodes", "in", "out", "constants"]
        prows = [[p.key, p.backend, p.node_count, len(p.inputs), len(p.outputs),
                  _size(p.constant_bytes)] for p in shown]
        if not report.preview:  # a preview ran no backend: nothing to say on these
            headers += ["processed", "preprocess s", "cache"]
            for row, p in zip(prows, shown):
                row += [_size(p.processed_bytes), f"{p.preprocess_seconds:.3f}",
                        {None: "-", True: "hit", False: "miss"}[p.cache_hit]]
        lines.append("")
        lines.append(tabulate(prows, headers=headers, tablefmt="simple"))
        lines += _more(shown, len(parts), "partitions")
    left = [o for o in report.operators if o.not_delegated]
    if left:
        shown_ops = sorted(left, key=lambda o: -o.not_delegated)[:max_rows]
        lines.append("")
        lines.append(tabulate([[o.op, o.not_delegated, o.delegated] for o in shown_ops],
                              headers=["not delegated: operator", "nodes left out", "delegated"],
                              tablefmt="simple"))
        lines += _more(shown_ops, len(left), "operators")
    if report.phases:
        trows = [[name, f"{sec:.3f}"] for name, sec in report.phases.items()]
        trows += [[f"  in {name}", f"{sec:.3f}"] for name, sec in report.external.items()]
        trows.append(["total", f"{report.seconds:.3f}"])
        lines.append("")
        lines.append(tabulate(trows, headers=["phase", "seconds"], tablefmt="simple"))
    if report.peak_rss_bytes:
        lines.append("")
        lines.append(f"peak memory (RSS): {report.peak_rss_bytes / 2**20:.0f} MiB"
                     + (f", largest child process {report.children_peak_rss_bytes / 2**20:.0f} MiB"
                        if report.children_peak_rss_bytes else ""))
    if report.lowering_cache is not None:
        lines.append("")
        lines.append(f"lowering cache: {report.lowering_cache}"
                     + (f" (key {report.lowering_cache_key[9:21]})" if report.lowering_cache_key
                        else ""))
        if report.refit:
            lines.append(refit_line(report.refit))
    return "\n".join(lines)
