"""A Model Explorer node-data overlay: nodes colored by partition.

Model Explorer (``pip install 'fastlower[explorer]'``, the ``ai-edge-model-explorer``
package that ExecuTorch's devtools use for graphs) shows extra per-node data from
a JSON file in its "node data" format (``model_explorer.node_data_builder``):
``{graph_id: {"results": {node_id: {"value": number, "bgColor": css}}, ...}}``.
Its PyTorch ``ExportedProgram`` adapter names the graph ``"graph"`` and each node
by its FX node name, so this overlay applies to the program the partitioner
tagged (the Edge program before delegation, e.g. saved with ``torch.export.save``):
each top-level node of the method gets its partition's color, its value is the
partition's number (1-based, in order of appearance), and nodes left out get 0
and the "not delegated" color. Thresholds give the value ranges the same colors,
so the side panel's statistics read the same.

No import of ``model_explorer`` is needed to write the file; with the package
installed, ``model_explorer.visualize(path, node_data_paths=[overlay])`` shows it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from .html import colors
from .json import write_atomic
from .model import ReportData, partition_key

GRAPH_ID = "graph"  # the graph id of Model Explorer's ExportedProgram adapter


def node_data(report: ReportData, method: str = "forward",
              graph_id: str = GRAPH_ID) -> Dict[str, Any]:
    """The overlay as a dict (``ModelNodeData``: graph id -> ``GraphNodeData``)."""
    palette = colors(report)
    numbers: Dict[str, int] = {}
    results: Dict[str, Dict[str, Any]] = {}
    for node in report.nodes:
        if node.method != method or node.graph:
            continue  # the adapter draws the method's top-level graph only
        if node.partition is None:
            results[node.name] = {"value": 0, "bgColor": palette["undelegated"]}
            continue
        key = partition_key(node.method, node.graph, node.partition)
        number = numbers.setdefault(key, len(numbers) + 1)
        results[node.name] = {"value": number, "bgColor": palette["partition"][key]}
    thresholds = [{"value": 0, "bgColor": palette["undelegated"]}]
    thresholds += [{"value": n, "bgColor": palette["partition"][k]} for k, n in numbers.items()]
    return {graph_id: {"results": results, "thresholds": thresholds}}


def write(report: ReportData, path: os.PathLike, method: str = "forward") -> None:
    """Write the overlay JSON to ``path`` (atomically)."""
    write_atomic(path, json.dumps(node_data(report, method), indent=1).encode())
