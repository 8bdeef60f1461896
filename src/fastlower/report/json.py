"""The report as JSON: a versioned document described by ``schema.json`` beside this file.

``schema_version`` is an integer. It goes up by one when a field is removed,
renamed or changes meaning; new optional fields do not change it. Readers
should check it. Version 1 has these top-level fields (``schema.json`` is the
exact JSON Schema, draft 2020-12):

=================  =======================================================field              meaning
=================  =======================================================schema_version     1
generator          ``"fastlower <version>"``
preview            true when only the partitioner ran (``fastlower report``)
methods            method names, in lowering order
coverage           overall: delegated/total ``call_function`` nodes and unique
                   operators (an operator counts as delegated when any of its
                   nodes is), with ``node_share``/``op_share`` in [0, 1]
coverage_by_backend  the same per backend id (that backend's nodes and operators
                   over all nodes and operators)
partitions         one object per partition: tag, backend, method, graph,
                   node_count, ops {op: count}, inputs, outputs, constant_bytes,
                   processed_bytes (null in a preview), preprocess_seconds,
                   cache_hit (null when no cache took part)
operators          per operator: delegated, not_delegated, by_backend {id: count}
not_delegated      every node left out: name, op, method, graph,
                   adjacent_partitions (partition keys ``method/graph/tag``)
nodes              every ``call_function`` node in topological order (bodies of
                   control-flow nodes right after them): index, name, op, shape,
                   method, graph, partition (tag or null), backend (or null)
timing             seconds: total, phases {name: s}, external {partitioner,
                   backend}, own (the lowering machinery's share)
lowering_cache     optional: {status, key, seconds {step: s}, refit (optional)}
                   when the lowering cache of ``to_edge_transform_and_lower``
                   took part (status "hit", "refit", "miss", "verified" or
                   "uncacheable"); refit: {source, tensors, changed, delegates,
                   remade, templates, reused} or {source, refused}
preprocess_classes optional: partitions of one structure {classes, derived,
                   verified, fallbacks [{tag, why}]} (``fastlower.preprocess.structure``)
edge_retraces      optional: the edge stage's retraces {skipped, repeats (of the
                   skipped, those repeating an earlier retrace), run, reasons [why
                   each that ran was not skipped]} (``fastlower.in_process.edge``)
memory             peak resident set in bytes from the process's start to the
                   end of the lowering (``getrusage``'s ``ru_maxrss``):
                   ``peak_rss_bytes`` of the lowering's process and
                   ``children_peak_rss_bytes`` of its largest child waited for
                   (preprocess workers; not a sum); 0 where not measured
notes              (optional) lines the reader should know, e.g. a type of the
                   program's inputs or outputs replaced by a stand-in on loading
=================  =======================================================
``graph`` is ``""`` for a method's top-level graph and the attribute path of a
control-flow body otherwise (``"true_graph_0"``, ``"body_graph_0/true_graph_0"``).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict

from .model import ReportData

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("schema.json")


def _generator() -> str:
    try:
        from importlib.metadata import version

        return f"fastlower {version('fastlower')}"
    except Exception:  # running from a source tree without metadata
        return "fastlower"


def _coverage(cov) -> Dict[str, Any]:
    return {"delegated_nodes": cov.delegated_nodes, "total_nodes": cov.total_nodes,
            "node_share": cov.node_share, "delegated_ops": cov.delegated_ops,
            "total_ops": cov.total_ops, "op_share": cov.op_share}


def to_dict(report: ReportData) -> Dict[str, Any]:
    """The report as a JSON-ready dict of schema version ``SCHEMA_VERSION``."""
    partitions = []
    for part in report.partition_records:
        entry = asdict(part)
        entry["key"] = part.key
        partitions.append(entry)
    return {
        "schema_version": SCHEMA_VERSION,
        "generator": _generator(),
        "preview": report.preview,
        "methods": list(report.methods),
        "coverage": _coverage(report.coverage),
        "coverage_by_backend": {b: _coverage(c) for b, c in report.coverage_by_backend().items()},
        "partitions": partitions,
        "operators": [asdict(o) for o in report.operators],
        "not_delegated": [asdict(n) for n in report.not_delegated],
        "nodes": [asdict(n) for n in report.nodes],
        "timing": {"total": report.seconds, "phases": dict(report.phases),
                   "external": dict(report.external), "own": report.own_seconds},
        **({"lowering_cache": {"status": report.lowering_cache, "key": report.lowering_cache_key,
                               "seconds": dict(report.lowering_cache_seconds),
                               **({"refit": dict(report.refit)} if report.refit else {})}}
           if report.lowering_cache is not None else {}),
        **({"preprocess_classes": report.preprocess_classes}
           if report.preprocess_classes else {}),
        **({"edge_retraces": report.edge_retraces} if report.edge_retraces else {}),
        "notes": list(report.notes),
        "memory": {"peak_rss_bytes": report.peak_rss_bytes,
                   "children_peak_rss_bytes": report.children_peak_rss_bytes},
    }


def dumps(report: ReportData, indent: int = 1) -> str:
    """The JSON text of ``to_dict(report)``."""
    return json.dumps(to_dict(report), indent=indent)


def write_atomic(path: os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and
    ``os.replace``: readers see the old file or the whole new one, never a part."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write(report: ReportData, path: os.PathLike) -> None:
    """Write the report's JSON document to ``path`` (atomically)."""
    write_atomic(path, dumps(report).encode())


def schema() -> Dict[str, Any]:
    """The JSON Schema of the document ``to_dict`` produces."""
    return json.loads(SCHEMA_PATH.read_text())
