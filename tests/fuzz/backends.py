"""Backends used by the fuzz and fault tests.

``FuzzEchoBackend`` returns a deterministic serialization of the partition it is
given (every node, its arguments, the signature and a digest of every tensor),
so comparing ``processed_bytes`` compares the delegates' contents.
``FuzzWeightMutatingBackend`` does the same and then changes every parameter it
was given in place (a backend that packs or folds weights without copying).
``FaultyBackend`` raises in partition k of a lowering (``arm``), or raises
``KeyboardInterrupt`` there.
"""

from __future__ import annotations

import hashlib
from typing import List, Optional, Type

import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import ExportedProgram


def _arg_text(arg) -> str:
    if isinstance(arg, torch.fx.Node):
        return f"%{arg.name}"
    if isinstance(arg, (list, tuple)):
        inner = ", ".join(_arg_text(a) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner})"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}: {_arg_text(v)}" for k, v in arg.items()) + "}"
    return repr(arg)


def _digest(t: torch.Tensor) -> str:
    data = t.detach().contiguous()
    raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
    return f"{tuple(t.shape)}:{t.dtype}:{hashlib.sha256(raw).hexdigest()[:16]}"


def serialize_program(program: ExportedProgram, compile_specs: List[CompileSpec]) -> bytes:
    """Deterministic text of a partition program: nodes, signature, tensors, specs."""
    lines = []
    for node in program.graph.nodes:
        lines.append(f"{node.op} {node.name} {node.target} "
                     f"{_arg_text(node.args)} {_arg_text(node.kwargs)}")
    for spec in program.graph_signature.input_specs:
        lines.append(f"in {spec.kind.name} {getattr(spec.arg, 'name', spec.arg)} {spec.target}")
    for spec in program.graph_signature.output_specs:
        lines.append(f"out {spec.kind.name} {getattr(spec.arg, 'name', spec.arg)} {spec.target}")
    for key, value in list(program.state_dict.items()) + list(program.constants.items()):
        if isinstance(value, torch.Tensor):
            lines.append(f"tensor {key} {_digest(value)}")
    for spec in compile_specs:
        lines.append(f"spec {spec.key} {bytes(spec.value).hex()}")
    return "\n".join(lines).encode()


def _debug_handles(program: ExportedProgram):
    handles = {}
    for node in program.graph.nodes:
        handle = node.meta.get("debug_handle")
        if node.op == "call_function" and isinstance(handle, int):
            handles[handle] = (handle,)
    return handles


class FuzzEchoBackend(BackendDetails):
    """processed_bytes = a serialization of the partition (its contents are compared)."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        return PreprocessResult(processed_bytes=serialize_program(edge_program, compile_specs),
                                debug_handle_map=_debug_handles(edge_program))


class FuzzWeightMutatingBackend(BackendDetails):
    """Serializes the partition, then scales every tensor it was given in place."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        data = serialize_program(edge_program, compile_specs)
        with torch.no_grad():
            for value in edge_program.state_dict.values():
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    value.mul_(0)
        return PreprocessResult(processed_bytes=data)


class FaultyBackend(BackendDetails):
    """Echo backend that raises ``error`` on its k-th ``preprocess`` call (0-based)."""

    fail_at: Optional[int] = None
    error: Type[BaseException] = ValueError
    calls: int = 0

    @classmethod
    def arm(cls, fail_at: Optional[int], error: Type[BaseException] = ValueError) -> None:
        cls.fail_at, cls.error, cls.calls = fail_at, error, 0

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        cls = FaultyBackend
        k = cls.calls
        cls.calls += 1
        if cls.fail_at is not None and k == cls.fail_at:
            raise cls.error(f"FaultyBackend: injected failure in partition {k}")
        return PreprocessResult(processed_bytes=serialize_program(edge_program, compile_specs))
