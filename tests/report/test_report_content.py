"""The delegation report's contents: coverage, partitions, operators, nodes left out,
control-flow bodies, the preview, JSON schema, text, Model Explorer overlay, and
where a report is found (per thread, per result)."""

import json
import sys
import threading
import warnings

import jsonschema
import pytest
import torch
from executorch.exir.lowered_backend_module import get_lowered_submodules

import fastlower
from fastlower.frontends.preview import preview
from fastlower.report import build_report, explorer, html
from fastlower.report import json as report_json
from fastlower.report import text
from fastlower.lowering.spec import MethodProgramsPartitionerSpec
from tests.models.partitioners import TargetsPartitioner
from tests.report.toy import (
    ADD_MUL, FastlowerToyBackend, add_mul_partitioner, add_mul_sin_program, cond_program,
)


def _lower(program, partitioner):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fastlower.lower_with_report(program, partitioner)


def _call_functions(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def test_coverage_partitions_operators_and_left_out_nodes():
    program = add_mul_sin_program()
    partitioner = TargetsPartitioner(ADD_MUL, FastlowerToyBackend.__name__, tag_constants=True)
    result, report = _lower(program, partitioner)
    nodes = _call_functions(program.graph_module)
    left = [n for n in nodes if n.target not in ADD_MUL]
    assert ((report.total_nodes, report.delegated_nodes)
            == (len(nodes), len(nodes) - len(left)) == (6, 4))
    cov = report.coverage
    assert (cov.delegated_nodes, cov.total_nodes, cov.delegated_ops, cov.total_ops) == (4, 6, 2, 4)
    assert report.coverage_by_backend()["FastlowerToyBackend"].op_share == pytest.approx(0.5)
    # each partition record matches its delegate in the lowered program
    lowered = {m.original_module.graph_module.code: m
               for _, m, _ in get_lowered_submodules(result.graph_module)}
    assert report.partitions == {"FastlowerToyBackend": 2} and len(lowered) == 2
    assert sorted(p.processed_bytes for p in report.partition_records) == sorted(
        len(m.processed_bytes) for m in lowered.values())
    for part in report.partition_records:
        assert part.ops == {"aten.add.Tensor": 1, "aten.mul.Tensor": 1} and part.node_count == 2
        assert part.preprocess_seconds > 0 and part.cache_hit is None
    first = next(p for p in report.partition_records if "x" in p.inputs)
    # the weight and the lifted 2.0 belong to the first partition (tag_constants)
    # (to_edge lifts the scalar 2.0 into a buffer)
    owned = program.state_dict["w"].nbytes + program.state_dict["_lifted_tensor_constant0"].nbytes
    assert first.constant_bytes == owned
    assert first.outputs == ["aten_mul_tensor"]
    ops = {o.op: (o.delegated, o.not_delegated) for o in report.operators}
    assert ops == {"aten.add.Tensor": (2, 0), "aten.mul.Tensor": (2, 0), "aten.sin": (0, 1),
                   "aten.cos": (0, 1)}
    left_out = {n.name: n for n in report.not_delegated}
    assert set(left_out) == {n.name for n in left}
    second = next(p for p in report.partition_records if p is not first)
    assert left_out["aten_sin_default"].adjacent_partitions == [first.key, second.key]
    assert left_out["aten_cos_default"].adjacent_partitions == [first.key]
    assert [n.name for n in report.nodes] == [n.name for n in nodes]
    assert report.nodes[0].shape == "f32[3, 4]"


def test_control_flow_bodies_are_counted_and_match_the_preview():
    program = cond_program()
    result, report = _lower(program, add_mul_partitioner())
    gm = program.graph_module
    bodies = [gm.get_submodule(n.target) for n in gm.graph.nodes
              if n.op == "get_attr" and n.target.startswith("submodule")]
    every = _call_functions(gm) + [n for b in bodies for n in _call_functions(b)]
    assert report.total_nodes == len(every) == 13
    delegated = [n for n in every if n.target in ADD_MUL]
    assert report.delegated_nodes == len(delegated) == 3
    graphs = sorted(p.graph for p in report.partition_records)
    assert graphs == ["", "submodule_0", "submodule_1"]
    # the body nodes come right after the cond node
    order = [(n.graph, n.name) for n in report.nodes]
    cond_at = order.index(("", "cond"))
    assert order[cond_at + 1][0] == "submodule_0" and order[-1] == ("", "aten_sub_tensor")
    # the preview of the same partitioner sees the same tagging
    preview_report = preview(program, add_mul_partitioner())
    assert preview_report.preview and preview_report.phases["partition"] > 0
    assert [(n.name, n.graph, n.partition) for n in preview_report.nodes] == \
        [(n.name, n.graph, n.partition) for n in report.nodes]
    assert all(p.processed_bytes is None for p in preview_report.partition_records)


def test_build_report_from_a_partition_result_runs_no_backend(monkeypatch):
    program = add_mul_sin_program()
    monkeypatch.setattr(FastlowerToyBackend, "preprocess",
                        staticmethod(lambda *a: pytest.fail("preprocess ran in a preview")))
    result = add_mul_partitioner()(program)
    report = build_report(result)
    assert report.preview and report.delegated_nodes == 4 and report.total_nodes == 6
    with pytest.raises(TypeError, match="partition_tags"):
        build_report(program)
    assert build_report(program, result.partition_tags).delegated_nodes == 4


def test_multi_method_report_and_report_for():
    programs = {"forward": add_mul_sin_program(), "other": cond_program()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fastlower.to_backend(MethodProgramsPartitionerSpec(
            programs, {"forward": add_mul_partitioner(), "other": add_mul_partitioner()}))
    report = fastlower.report_for(result)
    assert report is fastlower.last_report() is fastlower.report_for(result["other"])
    assert report.methods == ["forward", "other"]
    assert report.total_nodes == 6 + 13 and report.delegated_nodes == 4 + 3
    assert {p.method for p in report.partition_records} == {"forward", "other"}
    assert fastlower.report_for(programs["forward"]) is None  # the input is not a result


def test_last_report_is_per_thread():
    seen = {}

    def lower(name, program):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fastlower.to_backend(program, add_mul_partitioner())
        seen[name] = (fastlower.last_report(), fastlower.report_for(result))

    before = fastlower.last_report()
    threads = [threading.Thread(target=lower, args=("a", add_mul_sin_program())),
               threading.Thread(target=lower, args=("b", cond_program()))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"][0] is seen["a"][1] and seen["b"][0] is seen["b"][1]
    assert (seen["a"][0].total_nodes, seen["b"][0].total_nodes) == (6, 13)
    assert fastlower.last_report() is before  # other threads' lowerings do not leak here


def test_collecting_gathers_each_finished_lowering_in_order():
    """The "a lowering finished" hook: a block gets every report made inside it, in order;
    another thread's only with all_threads; nothing after the block ends."""
    def lower(program):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fastlower.to_backend(program, add_mul_partitioner())

    other: list = []
    with fastlower.report.collecting() as mine, \
            fastlower.report.collecting(all_threads=True) as everyone:
        first = lower(add_mul_sin_program())
        with fastlower.report.collecting() as inner:  # blocks nest
            second = lower(cond_program())
        thread = threading.Thread(target=lambda: other.append(lower(add_mul_sin_program())))
        thread.start()
        thread.join()
    lower(add_mul_sin_program())  # after the blocks: not collected
    assert mine == [fastlower.report_for(first), fastlower.report_for(second)]
    assert inner == [fastlower.report_for(second)]
    assert everyone == mine + [fastlower.report_for(other[0])]
    assert all(r is not None for r in everyone)


def test_json_document_follows_its_schema():
    _, report = _lower(cond_program(), add_mul_partitioner())
    doc = json.loads(report_json.dumps(report))
    jsonschema.validate(doc, report_json.schema())
    assert doc["schema_version"] == report_json.SCHEMA_VERSION == 1
    assert doc["coverage"]["delegated_nodes"] == 3 and len(doc["nodes"]) == 13
    assert {p["key"] for p in doc["partitions"]} == {
        "forward/tag0", "forward/submodule_0/tag1", "forward/submodule_1/tag2"}
    doc["coverage"]["node_share"] = 2  # the schema does catch a broken document
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, report_json.schema())


def test_text_summary_and_backward_compatible_format():
    _, report = _lower(add_mul_sin_program(), add_mul_partitioner())
    summary = text.summary(report)
    assert "FastlowerToyBackend  4/6      66.7%  2/4" in summary
    assert "aten.sin" in summary and "partition+plan" in summary
    assert "delegated call_function nodes: 4/6 (66.7%)" in report.format()


def test_html_page_is_self_contained_and_escaped():
    program = add_mul_sin_program()
    _, report = _lower(program, add_mul_partitioner())
    report.nodes[0].name = "</script><script>alert(1)</script>"
    page = html.render(report, title="<b>t</b>")
    assert "http://" not in page and "https://" not in page  # nothing to fetch
    assert "<script>alert(1)" not in page and "&lt;b&gt;t&lt;/b&gt;" in page
    assert page.count('<tr><td>forward/tag') == 2


def test_model_explorer_overlay_shape():
    _, report = _lower(add_mul_sin_program(), add_mul_partitioner())
    data = explorer.node_data(report)
    assert list(data) == [explorer.GRAPH_ID]
    results = data["graph"]["results"]
    assert set(results) == {n.name for n in report.nodes}
    assert {r["value"] for r in results.values()} == {0, 1, 2}
    assert all(r["bgColor"].startswith("#") for r in results.values())
    colors = {r["value"]: r["bgColor"] for r in results.values()}
    assert len(set(colors.values())) == 3
    assert [t["value"] for t in data["graph"]["thresholds"]] == [0, 1, 2]


def test_report_for_an_edge_program_manager_from_to_edge_transform_and_lower():
    import executorch.exir  # looked up inside the block: a name bound before is the reference
    import fastlower.patch

    from tests.report.toy import AddMulPartitioner, AddMulSin

    aten = torch.export.export(AddMulSin(), (torch.randn(3, 4),))
    with warnings.catch_warnings(), fastlower.patch.installed():
        warnings.simplefilter("ignore")
        manager = executorch.exir.to_edge_transform_and_lower(
            aten, partitioner=[AddMulPartitioner()])
    report = fastlower.report_for(manager)
    assert report is fastlower.last_report() and report.delegated_nodes == 4


def _vm_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _mem_total_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_peak_memory_in_bytes_in_the_json_report():
    import fastlower.preprocess as pp

    # 64 MiB this process holds (and has touched) during the lowering: the peak recorded
    # at its end is at least the resident set measured now, in bytes (a KiB figure would
    # be 1024 times smaller), and below the machine's memory
    ballast = torch.ones(16 << 20)
    before = _vm_rss_bytes()

    class ThreeGroups(torch.nn.Module):  # three add/mul partitions split by sin: one runs
        def forward(self, x):            # here (the primer), two in the fork pool
            for _ in range(3):
                x = torch.sin((x + 1.0) * 2.0)
            return x

    from executorch.exir import to_edge

    program = to_edge(torch.export.export(ThreeGroups(), (torch.randn(3, 4),))).exported_program()
    with pp.options(workers=2, start_method="fork"):
        _, report = _lower(program, add_mul_partitioner())
    del ballast
    assert report.preprocess_runner == "fork pool, 2 workers"
    doc = json.loads(report_json.dumps(report))
    jsonschema.validate(doc, report_json.schema())
    memory = doc["memory"]
    assert memory["peak_rss_bytes"] == report.peak_rss_bytes
    # (less 1 MiB: the kernel folds a thread's page counts into the high-water mark late)
    assert before - (1 << 20) <= memory["peak_rss_bytes"] <= _mem_total_bytes()
    assert 0 <= memory["children_peak_rss_bytes"] <= _mem_total_bytes()
    # the pool's workers have been waited for: they count as children (a fork of this
    # process: its resident set is at least the pages it touched, well above a MiB)
    assert memory["children_peak_rss_bytes"] > 1 << 20
    assert f"peak memory (RSS): {report.peak_rss_bytes / 2**20:.0f} MiB" in text.summary(report)
