"""Lower a program calling a custom operator through the lowering cache, in a process of
its own (a subprocess of ``test_operator_sources``):
``python -m tests.cache.operator_lowering OUT.json OPS_DIR IMPL CACHE [DTYPE]``.

OPS_DIR holds ``fl_ops.py``, which defines the operator ``fltest_ops::scale`` (its
decomposition written by the test); IMPL ``reference`` or ``fastlower``; DTYPE, the
default dtype set after export, before the lowering (``float32`` if not given). OUT.json: the
report's ``lowering_cache`` (fastlower); the ``.pte`` in OUT.json.pte.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import torch


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.ops.fltest_ops.scale(self.linear(x))


def main(argv) -> None:
    out, ops_dir, impl, cache = Path(argv[0]), argv[1], argv[2], argv[3]
    sys.path.insert(0, ops_dir)
    importlib.import_module("fl_ops")
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    program = torch.export.export(Scaled().eval(), (torch.ones(2, 8),))
    torch.set_default_dtype(getattr(torch, argv[4] if len(argv) > 4 else "float32"))
    found = {}
    if impl == "reference":
        from executorch.exir import to_edge_transform_and_lower

        manager = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    else:
        import fastlower
        import fastlower.preprocess
        from fastlower.cache import to_edge_transform_and_lower as cached

        with fastlower.preprocess.options(workers=1, cache_dir=cache):
            manager = cached(program, partitioner=[XnnpackPartitioner()])
        found["lowering_cache"] = str(fastlower.last_report().lowering_cache)
    out.with_name(out.name + ".pte").write_bytes(bytes(manager.to_executorch().buffer))
    out.write_text(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1:])
