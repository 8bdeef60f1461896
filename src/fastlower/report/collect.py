"""Fill a ``LoweringReport`` from tagged graphs: from a finished lowering, or from a
partitioner's result alone (the preview, no backend runs).

Both walk the same thing: the graph the partitioner tagged, and recursively the
bodies of its control-flow nodes.  A finished lowering has already replaced
those bodies' graphs in place (as the reference does), so it hands its tagged
graphs over as neutral records (``fastlower.base.records``): this module reads those,
never the lowering's own objects.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, TypeVar, cast

import torch

from ..core.encode import _CONTROL_FLOW_ARGS
from ..base.loading.notes import describe_replacements
from ..base.records import TOP, GraphRecord, MethodRecord, join_path
from . import registry
from .document import LoweringReport
from .memory import record_peak
from .model import NodeRecord, OperatorRecord, PartitionRecord, ReportData, UndelegatedNode


def view_of_module(gm: torch.fx.GraphModule, path: str = TOP) -> GraphRecord:
    """Walk an FX graph module and its control-flow bodies."""
    view = GraphRecord(path, list(gm.graph.nodes))
    for node in view.nodes:
        if node.op == "call_function" and node.target in _CONTROL_FLOW_ARGS:
            view.bodies[node] = [
                view_of_module(cast(torch.fx.GraphModule, gm.get_submodule(node.args[i].target)),
                               join_path(path, node.args[i].target))
                for i in _CONTROL_FLOW_ARGS[node.target]]
    return view


def op_name(target: Any) -> str:
    """``aten.add.Tensor`` for ATen/Edge operators, the qualified name otherwise."""
    name = getattr(target, "_name", None) or getattr(target, "name", None)
    if callable(name):
        try:
            name = name()
        except TypeError:
            name = None
    if isinstance(name, str):
        return name.replace("::", ".")
    if hasattr(target, "__module__") and hasattr(target, "__qualname__"):
        return f"{target.__module__}.{target.__qualname__}".replace("_operator.", "operator.")
    return str(target)


def shape_of(node: torch.fx.Node) -> str:
    """``f32[1, 8, 64]``-style text of the node's value (tuple values joined by ``, ``)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else (val,)
    parts = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            dtype = str(v.dtype).replace("torch.", "")
            parts.append(f"{_SHORT_DTYPES.get(dtype, dtype)}[{', '.join(str(d) for d in v.shape)}]")
    return ", ".join(parts)


_SHORT_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                 "int64": "i64", "int32": "i32", "int8": "i8", "uint8": "u8", "bool": "bool"}


def tensor_bytes(value: Any) -> int:
    """Bytes of a (real or fake) tensor's elements; 0 for anything else."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return 0


class ReportCollector:
    """Accumulates the records of one report over its methods and graphs."""

    def __init__(self, report: ReportData) -> None:
        self.report = report
        self.parts: Dict[Tuple[str, str, str], PartitionRecord] = {}
        self.ops: Dict[str, OperatorRecord] = {}

    def method(self, method: str, view: GraphRecord, tags: Mapping[str, Any]) -> None:
        self.report.methods.append(method)
        self._graph(method, view, tags, inherited=None)

    def _graph(self, method: str, view: GraphRecord, tags: Mapping[str, Any],
               inherited: Optional[PartitionRecord]) -> None:
        for node in view.nodes:
            part = inherited or self._partition_of(method, view.path, node, tags)
            if node.op == "placeholder":
                if part is not None and inherited is None:  # a constant the partition owns
                    part.constant_bytes += tensor_bytes(node.meta.get("val"))
                continue
            if node.op != "call_function":
                continue
            self._node(method, view.path, node, part, tags)
            for body in view.bodies.get(node, ()):
                # a delegated control-flow node takes its bodies with it
                self._graph(method, body, tags, part)

    def _partition_of(self, method: str, path: str, node: torch.fx.Node,
                      tags: Mapping[str, Any]) -> Optional[PartitionRecord]:
        tag = node.meta.get("delegation_tag")
        if tag is None or tag not in tags:
            return None
        key = (method, path, tag)
        if key not in self.parts:
            self.parts[key] = PartitionRecord(tag=tag, backend=tags[tag].backend_id,
                                              method=method, graph=path)
        return self.parts[key]

    def _node(self, method: str, path: str, node: torch.fx.Node,
              part: Optional[PartitionRecord], tags: Mapping[str, Any]) -> None:
        op = op_name(node.target)
        record = NodeRecord(index=len(self.report.nodes), name=node.name, op=op,
                            shape=shape_of(node), graph=path, method=method,
                            partition=part.tag if part else None,
                            backend=part.backend if part else None)
        self.report.nodes.append(record)
        stats = self.ops.setdefault(op, OperatorRecord(op))
        if part is None:
            stats.not_delegated += 1
            neighbours = []
            for other in list(node.all_input_nodes) + list(node.users):
                near = self._partition_of(method, path, other, tags)
                if near is not None and near.key not in neighbours:
                    neighbours.append(near.key)
            self.report.not_delegated.append(
                UndelegatedNode(node.name, op, path, method, neighbours))
            return
        stats.delegated += 1
        stats.by_backend[part.backend] = stats.by_backend.get(part.backend, 0) + 1
        part.node_count += 1
        part.ops[op] = part.ops.get(op, 0) + 1
        if path != part.graph:
            return  # inside a delegated control-flow body: its edges are the body's own
        for arg in node.all_input_nodes:
            if self._partition_of(method, path, arg, tags) is not part and \
                    arg.name not in part.inputs:
                part.inputs.append(arg.name)
        for user in node.users:
            if self._partition_of(method, path, user, tags) is not part and \
                    node.name not in part.outputs:
                part.outputs.append(node.name)

    def close(self) -> None:
        report = self.report
        report.partition_records = list(self.parts.values())
        report.operators = sorted(self.ops.values(),
                                  key=lambda o: (-o.delegated - o.not_delegated, o.op))
        report.total_nodes = len(report.nodes)
        report.delegated_nodes = sum(1 for n in report.nodes if n.partition is not None)
        report.partitions = {}
        for part in report.partition_records:
            report.partitions[part.backend] = report.partitions.get(part.backend, 0) + 1


def from_lowerings(report: ReportData, methods: Sequence[MethodRecord]) -> None:
    """Records of a finished lowering: structure from the tagged graphs, then each
    partition's processed bytes, owned constants and preprocess time."""
    collector = ReportCollector(report)
    for method in methods:
        collector.method(method.name, method.graph, method.partition_tags)
    collector.close()
    by_key = {(p.method, p.graph, p.tag): p for p in report.partition_records}
    for method in methods:
        for part in method.partitions:
            record = by_key.get((method.name, part.graph, part.tag))
            if record is None:
                continue
            if part.processed_bytes is not None:
                record.processed_bytes = part.processed_bytes
            record.constant_bytes = owned_constant_bytes(part.program)
            record.preprocess_seconds = part.preprocess_seconds
            record.cache_hit = part.cache_hit


_Lowering = TypeVar("_Lowering")


def finish_report(report: LoweringReport, program: Any, lowerings: Sequence[_Lowering],
                  record_of: Callable[[_Lowering, LoweringReport], MethodRecord]) -> None:
    """Close the timing, collect the records of ``lowerings`` and publish the report.

    ``record_of(lowering, report)`` turns each lowering into its neutral
    ``MethodRecord`` (called after the timing is closed, so the walk is not counted in
    any phase; ``report.partition_timing`` gives each partition's preprocess time).
    ``program`` is the lowering's result (an ``ExportedProgram`` or a dict of them), registered so
    ``fastlower.report_for(program)`` finds this report.
    """
    report.mark("apply")
    report.seconds = sum(report.phases.values())  # the phases cover the whole call
    from_lowerings(report, [record_of(lowering, report) for lowering in lowerings])
    report.drop_partition_timing()
    report.notes.extend(n for n in describe_replacements(program) if n not in report.notes)
    record_peak(report)
    registry.publish(report, program)


def owned_constant_bytes(program) -> int:
    """Bytes of the parameters, buffers and lifted constants a partition program takes."""
    sig = program.graph_signature
    total = 0
    for spec in sig.input_specs:
        if spec.target is None:
            continue
        value = program.state_dict.get(spec.target, program.constants.get(spec.target))
        total += tensor_bytes(value)
    return total


def from_tagged(report: ReportData, programs: Mapping[str, Any],
                partition_tags: Mapping[str, Mapping[str, Any]]) -> None:
    """Records of tagged programs (per method) without any lowering: the preview."""
    collector = ReportCollector(report)
    for method, program in programs.items():
        gm = program.graph_module if hasattr(program, "graph_module") else program
        collector.method(method, view_of_module(gm), partition_tags.get(method) or {})
    collector.close()


def build_report(source: Any, partition_tags: Optional[Mapping[str, Any]] = None) -> LoweringReport:
    """The preview report of a partitioner's result.

    ``source`` is a ``PartitionResult``, a dict of them per method, or a tagged
    ``ExportedProgram`` together with its ``partition_tags``.
    """
    report = LoweringReport(preview=True)
    if isinstance(source, dict):
        programs = {m: r.tagged_exported_program for m, r in source.items()}
        tags = {m: r.partition_tags or {} for m, r in source.items()}
    elif hasattr(source, "tagged_exported_program"):
        programs = {"forward": source.tagged_exported_program}
        tags = {"forward": source.partition_tags or {}}
    else:
        if partition_tags is None:
            raise TypeError("build_report(program) needs the partition_tags that go with it")
        programs, tags = {"forward": source}, {"forward": partition_tags}
    from_tagged(report, programs, tags)
    return report
