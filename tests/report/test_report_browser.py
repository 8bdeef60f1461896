"""The HTML report in a real headless Chromium (Debian's ``chromium``; ``.ci/run``
installs it). Skipped, with the reason, when no Chromium is on PATH.

Chromium's own flags do the work: ``--dump-dom`` prints the DOM after the page's
script ran, ``--enable-logging=stderr`` prints every console message (and
uncaught error) as a ``CONSOLE`` line, ``--screenshot`` writes a PNG.
"""

import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from PIL import Image

from fastlower.frontends.preview import preview
from fastlower.report import LoweringReport, NodeRecord, PartitionRecord, html

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium; .ci/run does)")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _load(tmp_path: Path, page: Path):
    """(DOM after the script ran, console lines) of ``page``."""
    run = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    return run.stdout, console


def _screenshot(tmp_path: Path, page: Path, size=(1300, 1100)) -> Image.Image:
    png = tmp_path / "shot.png"
    run = _chromium(tmp_path, "--hide-scrollbars", f"--window-size={size[0]},{size[1]}",
                    f"--screenshot={png}", page.as_uri())
    assert run.returncode == 0 and png.exists(), run.stderr[-2000:]
    return Image.open(png).convert("RGB")


def _cells(dom: str) -> list:
    return re.findall(r'<div class="cell( body)?" data-i="\d+" '
                      r'style="background: (rgb\([^)]*\))', dom)


@pytest.fixture(scope="module")
def llama_report():
    """The XNNPACK partitioner's preview of the bundled 1-layer decoder (no preprocess)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from fastlower.frontends.examples.llama import edge_llama

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, _ = edge_llama(1)
        return preview(program, XnnpackPartitioner())


def test_page_loads_without_console_errors_and_draws_one_cell_per_node(tmp_path, llama_report):
    page = tmp_path / "report.html"
    html.write(llama_report, page, title="llama 1 layer")
    dom, console = _load(tmp_path, page)
    assert console == []  # no console output at all, errors included
    assert 'id="js-errors" data-count="0"' in dom
    cells = _cells(dom)
    assert len(cells) == len(llama_report.nodes) == llama_report.total_nodes > 50
    assert f'data-drawn="{len(llama_report.nodes)}"' in dom
    # colored: one color per partition shade plus the "not delegated" color
    assert len({c for _, c in cells}) >= 3


def test_a_page_with_a_script_error_is_caught(tmp_path, llama_report):
    """The error capture used above does see errors (the check can fail)."""
    page = tmp_path / "broken.html"
    page.write_text(html.render(llama_report).replace(
        'strip.setAttribute("data-drawn"', 'undefinedFunction(); strip.setAttribute("data-drawn"'))
    dom, console = _load(tmp_path, page)
    assert any("undefinedFunction" in line for line in console)
    assert 'data-count="1"' in dom


def _synthetic(n_nodes: int, per_partition: int) -> LoweringReport:
    """A report of ``n_nodes`` nodes, alternating partitions of two backends and gaps."""
    report = LoweringReport(methods=["forward"])
    for i in range(n_nodes):
        block = i // per_partition
        delegated = block % 3 != 2
        backend = ("BackendA", "BackendB")[block % 2] if delegated else None
        tag = f"tag{block}" if delegated else None
        report.nodes.append(NodeRecord(i, f"node_{i}", "aten.add.Tensor", "f32[8]", "",
                                       partition=tag, backend=backend))
        if delegated and i % per_partition == 0:
            report.partition_records.append(PartitionRecord(tag, backend, node_count=per_partition))
    for part in report.partition_records:
        report.partitions[part.backend] = report.partitions.get(part.backend, 0) + 1
    report.total_nodes = n_nodes
    report.delegated_nodes = sum(1 for n in report.nodes if n.partition)
    return report


def test_five_thousand_nodes_draw_and_the_screenshot_is_not_blank(tmp_path):
    report = _synthetic(5000, 40)
    page = tmp_path / "big.html"
    html.write(report, page)
    dom, console = _load(tmp_path, page)
    assert console == []
    assert len(_cells(dom)) == 5000
    shot = _screenshot(tmp_path, page, size=(1300, 1400))
    colors = shot.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 1
    # the picture is on screen: the "not delegated" color covers many pixels
    orange = tuple(int(html.UNDELEGATED_COLOR[i:i + 2], 16) for i in (1, 3, 5))
    count = dict((c, n) for n, c in colors).get(orange, 0)
    assert count > 1000, f"only {count} pixels of the undelegated color"
