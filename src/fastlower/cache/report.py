"""The delegation report of a lowering served from the cache, built from its programs.

No partitioner ran, so there is no tagged graph: the report is read off the
lowered programs themselves. Each ``executorch_call_delegate`` is a partition
(its tag is the ``delegation_tag`` its nodes carried, else the delegate's
attribute name; its nodes, operators, owned constants and processed bytes come
from the delegate's own program); every other ``call_function`` node is a node
left out (the ``getitem`` nodes that read a delegate's outputs are the delegate's,
not the program's). Control-flow bodies are walked as the live report walks
them. Every partition record has ``cache_hit=True``; the report's
``lowering_cache`` is ``"hit"``. A report built this way covers every delegate
of every partitioner of the call, where a live lowering's ``last_report()`` is
that of its last ``to_backend`` call.
"""

from __future__ import annotations

import operator
from typing import Dict, Mapping

import torch
from torch.export import ExportedProgram

from ..core.encode import _CONTROL_FLOW_ARGS
from ..base.records import join_path
from ..report.collect import ReportCollector, owned_constant_bytes, op_name, shape_of
from ..report.document import LoweringReport
from ..report.memory import record_peak
from ..report.model import NodeRecord, OperatorRecord, PartitionRecord, UndelegatedNode


def _tag(lowered) -> str:
    for node in lowered.original_module.graph.nodes:
        tag = node.meta.get("delegation_tag")
        if isinstance(tag, str):
            return tag
    return ""


def _bodies(gm: torch.fx.GraphModule, node: torch.fx.Node, path: str):
    for i in _CONTROL_FLOW_ARGS.get(node.target, ()):
        attr = node.args[i].target
        yield gm.get_submodule(attr), join_path(path, attr)


def _walk(collector: ReportCollector, method: str, gm: torch.fx.GraphModule, path: str) -> None:
    from executorch.exir.delegate import executorch_call_delegate

    report = collector.report
    owner: Dict[torch.fx.Node, PartitionRecord] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is executorch_call_delegate:
            attr = node.args[0].target
            lowered = getattr(gm, attr)
            record = PartitionRecord(tag=_tag(lowered) or attr, backend=lowered.backend_id,
                                     method=method, graph=path)
            record.inputs = [a.name for a in node.args[1:] if isinstance(a, torch.fx.Node)]
            record.processed_bytes = len(lowered.processed_bytes)
            record.constant_bytes = owned_constant_bytes(lowered.original_module)
            record.cache_hit = True
            collector.parts[(method, path, attr)] = record
            owner[node] = record
            for user in node.users:
                if user.op == "call_function" and user.target is operator.getitem:
                    owner[user] = record
                    record.outputs.append(user.name)
            if not record.outputs:
                record.outputs.append(node.name)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        record = owner.get(node)
        if record is not None:
            if node.target is not operator.getitem:
                _delegated(collector, record, getattr(gm, node.args[0].target)
                           .original_module.graph_module, path)
            continue
        op = op_name(node.target)
        report.nodes.append(NodeRecord(index=len(report.nodes), name=node.name, op=op,
                                       shape=shape_of(node), graph=path, method=method))
        stats = collector.ops.setdefault(op, OperatorRecord(op))
        stats.not_delegated += 1
        near = []
        for other in list(node.all_input_nodes) + list(node.users):
            found = owner.get(other)
            if found is not None and found.key not in near:
                near.append(found.key)
        report.not_delegated.append(UndelegatedNode(node.name, op, path, method, near))
        for sub, sub_path in _bodies(gm, node, path):
            _walk(collector, method, sub, sub_path)


def _delegated(collector: ReportCollector, record: PartitionRecord, gm: torch.fx.GraphModule,
               path: str) -> None:
    report = collector.report
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        op = op_name(node.target)
        report.nodes.append(NodeRecord(index=len(report.nodes), name=node.name, op=op,
                                       shape=shape_of(node), graph=path, method=record.method,
                                       partition=record.tag, backend=record.backend))
        stats = collector.ops.setdefault(op, OperatorRecord(op))
        stats.delegated += 1
        stats.by_backend[record.backend] = stats.by_backend.get(record.backend, 0) + 1
        record.node_count += 1
        record.ops[op] = record.ops.get(op, 0) + 1
        for sub, _ in _bodies(gm, node, path):
            _delegated(collector, record, sub, path)


def report_from_programs(programs: Mapping[str, ExportedProgram], status: str, key: str,
                         seconds: Dict[str, float]) -> LoweringReport:
    """A report of ``programs`` (a cached lowering's result), marked ``status``."""
    report = LoweringReport.start()
    collector = ReportCollector(report)
    for method, program in programs.items():
        report.methods.append(method)
        _walk(collector, method, program.graph_module, "")
    collector.close()
    report.lowering_cache = status
    report.lowering_cache_key = key
    report.lowering_cache_seconds = dict(seconds)
    report.phases = {f"lowering cache {k}": v for k, v in seconds.items()}
    report.seconds = sum(seconds.values())
    for record in report.partition_records:
        report.cache_hits[record.backend] = report.cache_hits.get(record.backend, 0) + 1
    record_peak(report)
    return report
