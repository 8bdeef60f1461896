"""The report as one self-contained HTML page (inline CSS and JavaScript, no network).

The page has the summary, sortable tables (partitions, operators, nodes left
out, time) and a picture of the graph: one cell per ``call_function`` node in
topological order, wrapped into rows, colored by backend (hue) and partition
(shade; neighbouring partitions alternate). A strip of cells stays readable at
thousands of nodes where a node-link drawing would be a hairball. Hovering a
cell shows the node, its operator, shape and partition. The template is
``templates/report.html.j2`` (Jinja2, autoescaped; the node data is embedded
with ``tojson``, which escapes ``<``, ``>`` and ``&``).
"""

from __future__ import annotations

import colorsys
import os
from typing import Dict, List, Optional, TypedDict, cast

import jinja2

from .json import to_dict, write_atomic
from .model import NodeRecord, ReportData, partition_key

#: base colors of the backends, in order of first appearance
BACKEND_COLORS = ["#1f6feb", "#2da44e", "#8250df", "#bf8700", "#0598bc", "#cf222e", "#6e7781"]
UNDELEGATED_COLOR = "#f0883e"
#: lightness offsets that neighbouring partitions of one backend cycle through
SHADES = [0.0, 0.16, -0.12, 0.28]

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("fastlower.report", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    undefined=jinja2.StrictUndefined,
)


def _shade(color: str, offset: float) -> str:
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    h, lum, s = colorsys.rgb_to_hls(r, g, b)
    lum = min(0.85, max(0.2, lum + offset))
    r, g, b = colorsys.hls_to_rgb(h, lum, s)
    return "#" + "".join(f"{round(v * 255):02x}" for v in (r, g, b))


class Palette(TypedDict):
    """Colors by backend id, by partition key, and of an undelegated node."""

    backend: Dict[str, str]
    partition: Dict[str, str]
    undelegated: str


def colors(report: ReportData) -> Palette:
    """Colors of the backends, of each partition (by key) and of undelegated nodes."""
    backend: Dict[str, str] = {}
    partition: Dict[str, str] = {}
    seen: Dict[str, int] = {}
    for part in report.partition_records:
        if part.backend not in backend:
            backend[part.backend] = BACKEND_COLORS[len(backend) % len(BACKEND_COLORS)]
    # shade by order of appearance in the graph so neighbours differ
    for node in report.nodes:
        key = _key(node)
        if key is None:  # not delegated
            continue
        if key not in partition:
            node_backend = cast(str, node.backend)  # a delegated node has its partition's
            k = seen.get(node_backend, 0)
            seen[node_backend] = k + 1
            partition[key] = _shade(backend[node_backend], SHADES[k % len(SHADES)])
    return {"backend": backend, "partition": partition, "undelegated": UNDELEGATED_COLOR}


def _key(node: NodeRecord) -> Optional[str]:
    """The key of the node's partition (None: not delegated)."""
    if node.partition is None:
        return None
    return partition_key(node.method, node.graph, node.partition)


def _cells(report: ReportData, palette: Palette) -> Dict[str, List]:
    nodes = [[n.name, n.op, n.shape, n.method, n.graph, _key(n), n.backend] for n in report.nodes]
    keys = [_key(n) for n in report.nodes]
    cell_colors = [palette["undelegated"] if key is None
                   else palette["partition"].get(key, palette["undelegated"]) for key in keys]
    return {"nodes": nodes, "colors": cell_colors}


def render(report: ReportData, title: str = "") -> str:
    """The HTML page of ``report``."""
    palette = colors(report)
    return _ENV.get_template("report.html.j2").render(
        report=report, doc=to_dict(report), title=title, colors=palette,
        cells=_cells(report, palette), pct=lambda share: f"{100 * share:.1f}%")


def write(report: ReportData, path: os.PathLike, title: str = "") -> None:
    """Write the page to ``path`` (atomically)."""
    write_atomic(path, render(report, title).encode())
