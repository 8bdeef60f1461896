"""The export script of the two-checkouts test (copied into each checkout, run there).

``python export_small.py OUT.json [--fresh]``: exports ``small_model.SmallModel``,
lowers it with ``fastlower.cache.to_edge_transform_and_lower`` (ExecuTorch's demo
add/mul partitioner) and writes ``OUT.json``: the report's ``lowering_cache`` and key,
the string meta of every node of the returned programs (delegates' programs
included), and the ``.pte`` (``OUT.json.pte``). With ``--fresh`` also the same meta of
ExecuTorch's own lowering of a fresh export, and its ``.pte`` (``OUT.json.fresh.pte``).
"""

import json
import sys
import warnings
from pathlib import Path


def node_meta(programs):
    """(method, node, stack_trace, nn_module_stack values, source_fn_stack) of every node."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    found = []
    todo = [(name, program) for name, program in programs.items()]
    while todo:
        method, program = todo.pop(0)
        for module in program.graph_module.modules():
            if isinstance(module, LoweredBackendModule):
                todo.append((f"{method}/delegate", module.original_module))
        for node in program.graph.nodes:
            stack = node.meta.get("nn_module_stack") or {}
            found.append([method, node.name, node.meta.get("stack_trace"),
                          repr(list(stack.values())), repr(node.meta.get("source_fn_stack"))])
    return found


def main(out, fresh):
    import torch
    import executorch.exir as exir
    from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

    import fastlower
    import fastlower.cache
    import fastlower.patch
    from small_model import SmallModel, inputs

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model = SmallModel().eval()
    program = torch.export.export(model, inputs(), strict=False)
    manager = fastlower.cache.to_edge_transform_and_lower(
        program, partitioner=[AddMulPartitionerDemo()])
    report = fastlower.report_for(manager)
    result = {"lowering_cache": report.lowering_cache, "key": report.lowering_cache_key,
              "meta": node_meta(manager._edge_programs)}
    Path(out + ".pte").write_bytes(bytes(manager.to_executorch().buffer))
    if fresh:
        with fastlower.patch.reference():
            reference = exir.to_edge_transform_and_lower(
                torch.export.export(model, inputs(), strict=False),
                partitioner=[AddMulPartitionerDemo()])
        result["fresh_meta"] = node_meta(reference._edge_programs)
        Path(out + ".fresh.pte").write_bytes(bytes(reference.to_executorch().buffer))
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], "--fresh" in sys.argv[2:])
