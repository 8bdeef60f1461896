"""How the edge stage and ``to_executorch`` grow with depth, reference against fastlower.

``python benchmarks/edge_stage_growth.py --layers 6,12,24 [--executorch-layers 3,6,12]
[--dim 64] --out FILE.json``:
for each depth, ExecuTorch's own Llama
(``fastlower.frontends.examples.user_models.executorch_llama``, the export_llm model class;
static shapes unless ``--dynamic``) is exported once; then, with each of XNNPACK's two
partitioner set-ups, the edge stage (``_gen_edge_manager_for_partitioners``) runs with
ExecuTorch's function and with fastlower's (``FASTLOWER_EDGE_RETRACES=skip``), each on a
deep copy, and their results are compared (``fastlower.in_process.edge.verify``). Last,
``to_executorch()`` is timed on the program ``to_edge_transform_and_lower`` makes with no
partitioner (every op on the portable path: the passes, memory planning and emitter over the
whole graph).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import warnings


def _program(layers: int, dim: int, dynamic: bool = False):
    import torch

    from fastlower.frontends.examples.user_models import executorch_llama

    torch.manual_seed(0)
    model, inputs = executorch_llama(layers, dim)
    shapes = ({1: torch.export.Dim("seq", min=1, max=16)},) if dynamic else None
    with torch.no_grad():
        return torch.export.export(model, inputs, dynamic_shapes=shapes)


def _edge(aten, setup: str) -> dict:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackDynamicallyQuantizedPartitioner, XnnpackPartitioner,
    )
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program._program import _gen_edge_manager_for_partitioners

    from fastlower.in_process.edge.decompose import SKIPPED, gen_edge_manager_for_partitioners
    from fastlower.in_process.edge.verify import first_difference

    def parts():
        return ([XnnpackPartitioner()] if setup == "xnnpack"
                else [XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()])

    out, managers = {}, {}
    for impl, fn in (("reference", _gen_edge_manager_for_partitioners),
                     ("fastlower", gen_edge_manager_for_partitioners)):
        program = copy.deepcopy(aten)
        start = time.perf_counter()
        managers[impl] = fn({"forward": parts()}, {"forward": program}, EdgeCompileConfig(),
                            None, False)
        out[impl] = time.perf_counter() - start
    out["skipped"], out["run"] = SKIPPED.skipped, SKIPPED.run
    out["same"] = first_difference(managers["reference"], managers["fastlower"]) is None
    out["nodes"] = len(managers["reference"].exported_program().graph.nodes)
    return out


def _to_executorch(aten) -> dict:
    from executorch.exir import to_edge_transform_and_lower

    manager = to_edge_transform_and_lower(copy.deepcopy(aten))
    start = time.perf_counter()
    manager.to_executorch()
    return {"to_executorch": time.perf_counter() - start,
            "nodes": len(manager.exported_program().graph.nodes)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="6,12,24")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--setups", default="xnnpack,dq+xnnpack")
    parser.add_argument("--dynamic", action="store_true",
                        help="a dynamic sequence length (fastlower then skips nothing)")
    parser.add_argument("--executorch-layers", default="3,6,12",
                        help="depths at which to time to_executorch (it grows faster)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    results = []
    edge_layers = [int(x) for x in args.layers.split(",") if x]
    executorch_layers = [int(x) for x in args.executorch_layers.split(",") if x]
    for layers in sorted(set(edge_layers) | set(executorch_layers)):
        aten = _program(layers, args.dim, args.dynamic)
        row = {"layers": layers, "dim": args.dim}
        for setup in args.setups.split(",") if layers in edge_layers else []:
            row[setup] = _edge(aten, setup)
        if layers in executorch_layers:
            row["portable"] = _to_executorch(aten)
        results.append(row)
        print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
