"""Differential harness: lower the same model with two ``to_backend``
implementations and require IDENTICAL results.

``impl`` is a ``to_backend``-like callable: the reference
``executorch.exir.backend.backend_api.to_backend`` or ``fastlower.to_backend``
(any singledispatch with the reference's three overloads works).

Paths (``lower(impl, factory, path)``):

* ``direct``  -- ``impl(edge_program, partitioner)`` for every method (the
  single-program overload); the results are wrapped in an
  ``EdgeProgramManager`` exactly like ``EdgeProgramManager.to_backend`` does.
* ``spec``    -- ``impl(MethodProgramsPartitionerSpec(programs, partitioners))``.
* ``manager`` -- ExecuTorch's own ``EdgeProgramManager.to_backend`` with
  ``impl`` swapped in (``fastlower.patch.installed()`` for fastlower).
* ``etl``     -- ExecuTorch's ``to_edge_transform_and_lower`` with ``impl``
  swapped in (cases that provide ATen programs).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import enum
import hashlib
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager
from executorch.exir.backend import backend_api as _ref_backend_api
from executorch.exir.backend.backend_api import MethodProgramsPartitionerSpec
from executorch.exir.graph_module import get_control_flow_submodules
from executorch.exir.lowered_backend_module import (
    get_lowered_submodules,
    LoweredBackendModule,
)
from executorch.exir.program import _program as _program_mod
from torch.export import ExportedProgram

# Load the ExecuTorch runtime (portable_lib C extension) once, up front, so a
# broken runtime install fails at collection rather than mid-suite.  (Two
# SIGBUS/SIGSEGV crashes seen while developing this harness coincided with
# src/fastlower/_core*.so being rebuilt in place under the running process --
# a mapped shared object must be replaced by rename, never rewritten.)
from executorch.runtime import Runtime as _Runtime  # noqa: E402

_Runtime.get()

REFERENCE: Callable = _ref_backend_api.to_backend
PATHS = ("direct", "spec", "manager", "etl")


# --------------------------------------------------------------------------- #
# Implementation selection / patching
# --------------------------------------------------------------------------- #
IMPL_ENV = "FASTLOWER_CONFORMANCE_IMPL"  # "reference": test the reference against itself


def reference_requested() -> bool:
    """Whether the run asks, explicitly, to compare the reference with itself
    (``FASTLOWER_CONFORMANCE_IMPL=reference``; ``FASTLOWER_DIFF_IMPL=reference`` too)."""
    return any(os.environ.get(name, "").strip().lower() == "reference"
               for name in (IMPL_ENV, "FASTLOWER_DIFF_IMPL"))


def load_fastlower() -> Callable:
    """``fastlower.to_backend``, or an error saying why it cannot be had.

    Never a silent fall-back to the reference: a suite that compared the reference
    with itself would pass whatever state fastlower is in. Ask for that explicitly
    with ``FASTLOWER_CONFORMANCE_IMPL=reference``.
    """
    try:
        import fastlower

        impl = fastlower.to_backend
    except Exception as exc:  # ImportError, AttributeError, anything while importing
        raise RuntimeError(
            f"`import fastlower; fastlower.to_backend` failed ({type(exc).__name__}: {exc}); "
            f"install the project (pip install '.[test]') or run with {IMPL_ENV}=reference "
            "to compare the reference with itself") from exc
    if impl is REFERENCE:
        raise RuntimeError("fastlower.to_backend IS the reference's to_backend: nothing would "
                           "be tested")
    return impl


def impl_name(impl: Callable) -> str:
    if impl is REFERENCE:
        return "reference"
    return f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', impl)}"


@contextlib.contextmanager
def _swap_program_binding(impl: Callable):
    """Generic fallback: make executorch.exir.program._program use ``impl``."""
    saved = _program_mod.to_backend
    _program_mod.to_backend = impl
    try:
        yield
    finally:
        _program_mod.to_backend = saved


def manager_context(impl: Callable):
    """Context in which ExecuTorch's EdgeProgramManager.to_backend /
    to_edge_transform_and_lower use ``impl``."""
    if impl is REFERENCE:
        if _program_mod.to_backend is not REFERENCE:
            raise AssertionError(
                "executorch.exir.program._program.to_backend is patched outside "
                f"the harness: {_program_mod.to_backend!r}"
            )
        return contextlib.nullcontext()
    try:
        import fastlower
        import fastlower.patch as fl_patch

        if impl is getattr(fastlower, "to_backend", None):
            return fl_patch.installed()
    except ImportError:
        pass
    return _swap_program_binding(impl)


# --------------------------------------------------------------------------- #
# Lowering
# --------------------------------------------------------------------------- #
@dataclass
class Lowered:
    path: str
    epm: EdgeProgramManager  # lowered programs
    # The INPUT programs after lowering (the reference mutates them, e.g. the
    # shared ``constants`` dict); None for the etl path (internal programs).
    inputs_after: Optional[Dict[str, ExportedProgram]]
    built: Any  # tests.models.base.Built
    inputs_before: Optional[Dict[str, Any]] = None  # input_state() before lowering

    @property
    def programs(self) -> Dict[str, ExportedProgram]:
        return dict(self.epm._edge_programs)


def _method_partitioners(built) -> Dict[str, Any]:
    p = built.partitioner
    if isinstance(p, dict):
        return dict(p)
    return {name: p for name in built.epm._edge_programs}


def _wrap(epm: EdgeProgramManager, programs: Dict[str, ExportedProgram]):
    # Mirrors EdgeProgramManager.to_backend.
    new = EdgeProgramManager(
        programs,
        copy.deepcopy(epm._config_methods),
        EdgeCompileConfig(_check_ir_validity=False),
    )
    new._etrecord = epm._etrecord
    return new


def lower_built(impl: Callable, built, path: str) -> Lowered:
    epm = built.epm
    inputs = dict(epm._edge_programs)
    if isinstance(built.partitioner, list) and path != "etl":
        # a chain: each partitioner lowers the previous one's result, on the same path
        for step in built.partitioner:
            epm = lower_built(impl, dataclasses.replace(built, epm=epm, partitioner=step), path).epm
        return Lowered(path, epm, inputs, built)
    if path == "direct":
        progs = {}
        parts = _method_partitioners(built)
        for name, ep in epm._edge_programs.items():
            progs[name] = impl(ep, parts[name]) if name in parts else ep
        return Lowered(path, _wrap(epm, progs), inputs, built)
    if path == "spec":
        progs = impl(
            MethodProgramsPartitionerSpec(epm._edge_programs, _method_partitioners(built))
        )
        return Lowered(path, _wrap(epm, progs), inputs, built)
    if path == "manager":
        with manager_context(impl):
            new = epm.to_backend(built.partitioner)
        return Lowered(path, new, inputs, built)
    if path == "etl":
        if built.aten is None or built.etl_partitioner is None:
            raise ValueError("case has no ATen programs for the etl path")
        from executorch.exir import to_edge_transform_and_lower

        with manager_context(impl):
            new = to_edge_transform_and_lower(
                built.aten, partitioner=built.etl_partitioner()
            )
        return Lowered(path, new, None, built)
    raise ValueError(f"unknown path {path!r}")


def lower(impl: Callable, factory: Callable, path: str) -> Lowered:
    """Build a FRESH program with ``factory()`` and lower it with ``impl``."""
    built = factory()
    before = {name: input_state(ep) for name, ep in built.epm._edge_programs.items()}
    lowered = lower_built(impl, built, path)
    lowered.inputs_before = before
    return lowered


def input_state(ep: ExportedProgram) -> Any:
    """A canonical description of everything lowering could mutate in an input program."""
    c = _Canon()
    return (
        ep.graph_module.code,
        [repr(s) for s in ep.graph_signature.input_specs],
        [repr(s) for s in ep.graph_signature.output_specs],
        _tensor_dict(c, ep.state_dict),
        _tensor_dict(c, ep.constants),
        [(n.name, sorted(n.meta), c(n.meta.get("delegation_tag"))) for n in ep.graph.nodes],
    )


def _check_inputs_unchanged(d: "Diffs", before, after) -> None:
    if before is None or after is None:
        return
    for name, state in before.items():
        if name in after:
            d.eq(f"input[{name}]", state, input_state(after[name]), "input program state")


def assert_inputs_unchanged(lowered: Lowered) -> None:
    """fastlower's contract: the caller's programs are exactly as they were."""
    d = Diffs()
    _check_inputs_unchanged(d, lowered.inputs_before, lowered.inputs_after)
    d.raise_if_any("the input program was modified")


def normalize_message(msg: str) -> str:
    return re.sub(r"0x[0-9a-fA-F]+", "0xADDR", msg)


@dataclass
class LoweringError:
    type: type
    message: str  # 0x-addresses normalized
    inputs_after: Dict[str, ExportedProgram]  # input programs after the failure
    inputs_before: Dict[str, Any]  # input_state() of each input program before lowering


def lower_error(impl: Callable, factory: Callable, path: str) -> LoweringError:
    """Lower expecting failure; returns the exception type, normalized
    message and the (possibly mutated) input programs."""
    built = factory()
    inputs = dict(built.epm._edge_programs)
    before = {name: input_state(ep) for name, ep in inputs.items()}
    try:
        lower_built(impl, built, path)
    except Exception as e:  # noqa: BLE001
        return LoweringError(type(e), normalize_message(str(e)), inputs, before)
    raise AssertionError(f"{impl_name(impl)} [{path}] did not raise")


def assert_same_error(ref: LoweringError, got: LoweringError, *, exact: Optional[bool] = None,
                      prefix: bool = False) -> None:
    """Compatible (default): ``got`` must be an instance of the reference's
    class (fastlower raises typed subclasses) with the reference's message,
    exactly (fastlower's node, tag and rule are notes and attributes, never
    part of ``str(exc)``; ``prefix``: ``ref.message`` is the deterministic
    start of the reference's message, which ``got``'s must start with), and the
    implementation under test must leave its input programs unchanged (the
    reference mutates them; fastlower deliberately does not).  Exact
    (FASTLOWER_DIFF_ERRORS=exact, for reference-vs-reference runs): same class,
    same message, same input side effects."""
    if exact is None:
        exact = os.environ.get("FASTLOWER_DIFF_ERRORS", "compatible") == "exact"
    d = Diffs()
    if exact:
        d.eq("error", ref.type.__qualname__, got.type.__qualname__, "exception type")
        d.eq("error", ref.message, got.message, "exception message")
    else:
        if not issubclass(got.type, ref.type):
            d.add("error", f"exception type {got.type.__qualname__} is not a subclass of "
                           f"{ref.type.__qualname__}")
        same = got.message.startswith(ref.message) if prefix else got.message == ref.message
        if not same:
            d.add("error", f"exception message is not the reference's:\n"
                           f"  reference : {ref.message!r}\n  under_test: {got.message!r}")
    if exact:
        for name in ref.inputs_after:
            if name in got.inputs_after:
                _compare_input_mutation(d, f"input[{name}]", ref.inputs_after[name],
                                        got.inputs_after[name])
    else:
        _check_inputs_unchanged(d, got.inputs_before, got.inputs_after)
    d.raise_if_any("error behaviour differs")


# --------------------------------------------------------------------------- #
# Canonicalization (deterministic, comparable representation of anything)
# --------------------------------------------------------------------------- #
_EVAL_KEY = re.compile(r"<eval_with_key>\.(\d+)")


class _Canon:
    """Turns objects into nested tuples of primitives.  Process-global counters and
    memory addresses (``0x…`` in reprs) are renumbered in order of first
    appearance, so relational structure is kept but absolute values (which differ
    between any two runs) are not; ``NodeSource.graph_id`` is dropped."""

    def __init__(self, with_values: bool = True) -> None:
        self.ids: Dict[int, int] = {}
        self.with_values = with_values

    def _id(self, i: Any) -> str:
        return f"id#{self.ids.setdefault(i, len(self.ids))}"

    def meta(self, key: str, value: Any) -> Any:
        """Canonical node.meta[key].  Two exports of the same model in one
        process differ in process-global counters / addresses, which are
        renumbered by first appearance (relations kept):
        ``seq_nr`` (autograd sequence counter) and the ``nn_module_stack``
        keys, which strict (dynamo) export derives from ``id(module)``."""
        if key == "seq_nr" and isinstance(value, int):
            return ("seq_nr", self._id(("seq", value)))
        if key == "nn_module_stack" and isinstance(value, dict):
            return (
                "nn_module_stack",
                tuple(
                    (self._id(("mod", k)) if k.isdigit() else k, self(v))
                    for k, v in value.items()
                ),
            )
        return self(value)

    def tensor(self, t: torch.Tensor):
        from torch._subclasses.fake_tensor import FakeTensor

        kind = type(t).__name__
        desc = (
            kind,
            tuple(str(s) for s in t.shape),
            str(t.dtype),
            tuple(str(s) for s in t.stride()) if t.layout == torch.strided else None,
            str(t.storage_offset()) if t.layout == torch.strided else None,
            str(t.device),
            bool(t.requires_grad),
        )
        if (
            self.with_values
            and not isinstance(t, FakeTensor)
            and t.device.type != "meta"
            and t.layout == torch.strided
        ):
            data = t.detach().contiguous()
            try:
                raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
            except Exception:  # e.g. views not viewable as bytes
                raw = repr(data.tolist()).encode()
            desc = desc + (hashlib.sha256(raw).hexdigest()[:24],)
        return desc

    def __call__(self, obj: Any) -> Any:
        c = self
        if isinstance(obj, str):
            # Code generated by torch.fx is named "<eval_with_key>.N" with a
            # process-global counter N: two exports of the same model differ
            # there (stack traces of control-flow code).  Renumber by first
            # appearance (keeps the relation, drops the absolute counter).
            return _EVAL_KEY.sub(lambda m: "<eval_with_key>." + self._id(("k", m.group(1))), obj)
        if obj is None or isinstance(obj, (bool, int, float, bytes)):
            if isinstance(obj, float) and obj != obj:
                return ("float", "nan")
            return obj
        if isinstance(obj, torch.Tensor):
            return c.tensor(obj)
        if isinstance(obj, torch.fx.Node):
            return ("Node", obj.name)
        if isinstance(obj, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return ("Sym", str(obj))
        if isinstance(obj, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
            return str(obj)
        if isinstance(obj, enum.Enum):
            return (type(obj).__name__, obj.name)
        if isinstance(obj, (list, tuple)):
            return (type(obj).__name__, tuple(c(x) for x in obj))
        if isinstance(obj, (set, frozenset)):
            return ("set", tuple(sorted(repr(c(x)) for x in obj)))
        if isinstance(obj, dict):
            return ("dict", tuple((c(k), c(v)) for k, v in obj.items()))
        if type(obj).__name__ == "NodeSource":
            # graph_id is id() of a graph met while tracing, long freed: whether two
            # NodeSources' ids coincide depends on address reuse (a CI run saw one
            # export reuse an address the other did not), so it is left out
            info = obj.node_info
            return (
                "NodeSource",
                obj.pass_name,
                tuple(a.name for a in obj.action),
                None if info is None else (info.name, info.target),
                tuple(c(x) for x in obj.from_node),
            )
        if isinstance(obj, torch.fx.GraphModule):
            return ("GraphModule", obj.code)
        if isinstance(obj, LoweredBackendModule):
            return ("LoweredBackendModule", obj.backend_id)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return (
                type(obj).__name__,
                tuple(
                    (f.name, c(getattr(obj, f.name))) for f in dataclasses.fields(obj)
                ),
            )
        if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            return ("op", str(obj))
        if callable(obj) and hasattr(obj, "__qualname__"):
            return ("callable", getattr(obj, "__module__", ""), obj.__qualname__)
        r = repr(obj)
        r = re.sub(r"0x[0-9a-fA-F]+", lambda m: self._id(int(m.group(0), 16)), r)
        return (type(obj).__name__, r)


# --------------------------------------------------------------------------- #
# Comparison
# --------------------------------------------------------------------------- #
class Diffs:
    def __init__(self) -> None:
        self.items: List[str] = []

    def add(self, where: str, msg: str) -> None:
        self.items.append(f"[{where}] {msg}")

    def eq(self, where: str, ref: Any, got: Any, what: str = "") -> bool:
        if ref == got:
            return True
        if isinstance(ref, str) and isinstance(got, str) and ("\n" in ref or "\n" in got):
            diff = "\n".join(
                difflib.unified_diff(
                    ref.splitlines(), got.splitlines(), "reference", "under_test", lineterm="", n=2
                )
            )
            self.add(where, f"{what} differs:\n{diff}")
        elif isinstance(ref, bytes) and isinstance(got, bytes):
            first = next(
                (i for i, (a, b) in enumerate(zip(ref, got)) if a != b),
                min(len(ref), len(got)),
            )
            self.add(
                where,
                f"{what} bytes differ: len {len(ref)} vs {len(got)}, first "
                f"difference at offset {first}: ref[{first}:+16]={ref[first:first+16]!r} "
                f"got[{first}:+16]={got[first:first+16]!r}",
            )
        else:
            self.add(where, f"{what} differs:\n  reference : {_short(ref)}\n"
                            f"  under_test: {_short(got)}")
        return False

    def seq(self, where: str, ref: Sequence, got: Sequence, what: str) -> None:
        if list(ref) != list(got):
            r, g = list(map(str, ref)), list(map(str, got))
            diff = "\n".join(difflib.unified_diff(r, g, "reference", "under_test", lineterm="",
                                                  n=1))
            self.add(where, f"{what} differ:\n{diff}")

    def raise_if_any(self, header: str) -> None:
        if self.items:
            shown = self.items[:40]
            more = f"\n... and {len(self.items) - 40} more" if len(self.items) > 40 else ""
            raise AssertionError(
                f"{header}: {len(self.items)} difference(s)\n" + "\n".join(shown) + more
            )


def _short(x: Any, n: int = 600) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def _walk_graph_modules(gm: torch.fx.GraphModule, prefix: str):
    """(path, graph_module) for gm and, recursively, control-flow submodules."""
    yield prefix, gm
    for name, sub, _node in get_control_flow_submodules(gm):
        yield from _walk_graph_modules(sub, f"{prefix}.{name}")


def _compare_graph(d: Diffs, where: str, rgm, ggm, rc: _Canon, gc: _Canon) -> None:
    d.eq(where, rgm.code, ggm.code, "graph_module.code")
    rnodes, gnodes = list(rgm.graph.nodes), list(ggm.graph.nodes)
    d.seq(where, [(n.op, n.name) for n in rnodes], [(n.op, n.name) for n in gnodes],
          "node (op, name) lists")
    for rn, gn in zip(rnodes, gnodes):
        w = f"{where}/node {rn.name}"
        if rn.name != gn.name:
            continue  # already reported
        d.eq(w, (str(rn.target), rc(rn.args), rc(rn.kwargs)),
             (str(gn.target), gc(gn.args), gc(gn.kwargs)), "target/args/kwargs")
        d.eq(w, list(rn.meta.keys()), list(gn.meta.keys()), "meta keys")
        for k in rn.meta:
            if k in gn.meta:
                d.eq(w, rc.meta(k, rn.meta[k]), gc.meta(k, gn.meta[k]), f"meta[{k!r}]")
        d.eq(w, [u.name for u in rn.users], [u.name for u in gn.users], "users")
    # module attributes (submodules, lowered modules, leftover fused modules...)
    d.eq(
        where,
        [(n, type(m).__name__) for n, m in rgm.named_children()],
        [(n, type(m).__name__) for n, m in ggm.named_children()],
        "named_children",
    )
    d.eq(
        where,
        [(n, rc(t)) for n, t in rgm.named_parameters(recurse=False)]
        + [(n, rc(t)) for n, t in rgm.named_buffers(recurse=False)],
        [(n, gc(t)) for n, t in ggm.named_parameters(recurse=False)]
        + [(n, gc(t)) for n, t in ggm.named_buffers(recurse=False)],
        "graph module params/buffers",
    )
    d.eq(where, type(rgm).__name__, type(ggm).__name__, "graph module class")


def _tensor_dict(c: _Canon, dct) -> List[Tuple[str, Any]]:
    return [(k, c(v)) for k, v in dct.items()]


def compare_exported_programs(d: Diffs, where: str, ref: ExportedProgram,
                              got: ExportedProgram) -> None:
    rc, gc = _Canon(), _Canon()
    d.eq(where, type(ref).__name__, type(got).__name__, "program type")
    rmods = list(_walk_graph_modules(ref.graph_module, "gm"))
    gmods = list(_walk_graph_modules(got.graph_module, "gm"))
    d.seq(where, [p for p, _ in rmods], [p for p, _ in gmods], "graph module tree")
    for (rp, rgm), (gp, ggm) in zip(rmods, gmods):
        if rp == gp:
            _compare_graph(d, f"{where}:{rp}", rgm, ggm, rc, gc)
    d.seq(where, [repr(s) for s in ref.graph_signature.input_specs],
          [repr(s) for s in got.graph_signature.input_specs], "graph_signature.input_specs")
    d.seq(where, [repr(s) for s in ref.graph_signature.output_specs],
          [repr(s) for s in got.graph_signature.output_specs], "graph_signature.output_specs")
    d.seq(where, list(ref.state_dict.keys()), list(got.state_dict.keys()), "state_dict keys")
    d.eq(where, _tensor_dict(rc, ref.state_dict), _tensor_dict(gc, got.state_dict),
         "state_dict values")
    d.seq(where, list(ref.constants.keys()), list(got.constants.keys()), "constants keys")
    d.eq(where, _tensor_dict(rc, ref.constants), _tensor_dict(gc, got.constants),
         "constants values")
    d.eq(where, rc(ref.module_call_graph), gc(got.module_call_graph), "module_call_graph")
    d.eq(where, rc(dict(ref.range_constraints)), gc(dict(got.range_constraints)),
         "range_constraints")
    d.eq(where, [type(v).__name__ for v in ref.verifiers],
         [type(v).__name__ for v in got.verifiers], "verifiers")
    d.eq(where, rc(ref.example_inputs), gc(got.example_inputs), "example_inputs")
    d.eq(where, rc(ref.tensor_constants if hasattr(ref, "tensor_constants") else None),
         gc(got.tensor_constants if hasattr(got, "tensor_constants") else None), "tensor_constants")

    # delegates, in order, recursively into control-flow submodules
    rdel = [(p, n, lm) for p, gm in rmods for n, lm, _ in get_lowered_submodules(gm)]
    gdel = [(p, n, lm) for p, gm in gmods for n, lm, _ in get_lowered_submodules(gm)]
    d.seq(where, [f"{p}.{n}" for p, n, _ in rdel], [f"{p}.{n}" for p, n, _ in gdel], "delegates")
    for (rp, rn, rlm), (gp, gn, glm) in zip(rdel, gdel):
        if (rp, rn) == (gp, gn):
            compare_lowered_modules(d, f"{where}:{rp}.{rn}", rlm, glm)


def compare_lowered_modules(d: Diffs, where: str, ref: LoweredBackendModule,
                            got: LoweredBackendModule) -> None:
    rc, gc = _Canon(), _Canon()
    d.eq(where, type(ref).__name__, type(got).__name__, "lowered module class")
    d.eq(where, ref.backend_id, got.backend_id, "backend_id")
    d.eq(where, [(s.key, s.value) for s in ref.compile_specs],
         [(s.key, s.value) for s in got.compile_specs], "compile_specs")
    d.eq(where, bytes(ref.processed_bytes), bytes(got.processed_bytes), "processed_bytes")
    rmeta, gmeta = ref.meta or {}, got.meta or {}
    d.eq(where, list(rmeta.keys()), list(gmeta.keys()), "meta keys")
    d.eq(where, rc(rmeta.get("debug_handle_map")), gc(gmeta.get("debug_handle_map")),
         'meta["debug_handle_map"]')
    d.eq(where, rc(rmeta.get("_delegate_info_meta")), gc(gmeta.get("_delegate_info_meta")),
         'meta.get("_delegate_info_meta")')
    d.eq(where, rc(rmeta), gc(gmeta), "meta")
    d.eq(where, rc(ref.named_data_store_output), gc(got.named_data_store_output),
         "named_data_store_output")
    compare_exported_programs(d, f"{where}.original_module", ref.original_module,
                              got.original_module)


def assert_same_input_side_effects(ref: "Lowered", got: "Lowered") -> None:
    """What lowering did to its INPUT programs (the reference mutates them:
    e.g. the constants dict shared between the input and the fake program
    loses constants moved into delegates and gains ``*_copy_N`` duplicates)."""
    d = Diffs()
    if ref.inputs_after is not None and got.inputs_after is not None:
        for name in ref.inputs_after:
            if name in got.inputs_after:
                _compare_input_mutation(d, f"input[{name}]", ref.inputs_after[name],
                                        got.inputs_after[name])
    d.raise_if_any("INPUT-program side effects differ (outputs are identical)")


def assert_same_lowering(
    ref: Any, got: Any, *, header: str = "lowering differs", check_inputs: bool = True
) -> None:
    """ref/got: Lowered, EdgeProgramManager, dict[str, ExportedProgram],
    ExportedProgram or LoweredBackendModule (same kind on both sides).
    With ``check_inputs`` (Lowered only) the input programs' post-lowering
    state is compared too (see ``assert_same_input_side_effects``)."""
    d = Diffs()
    if isinstance(ref, LoweredBackendModule):
        compare_lowered_modules(d, "lowered_module", ref, got)
        d.raise_if_any(header)
        return
    if isinstance(ref, Lowered):
        if check_inputs and ref.inputs_after is not None and got.inputs_after is not None:
            d.seq("input programs", list(ref.inputs_after), list(got.inputs_after), "methods")
            for name in ref.inputs_after:
                if name in got.inputs_after:
                    _compare_input_mutation(d, f"input[{name}]", ref.inputs_after[name],
                                            got.inputs_after[name])
        d.eq("manager", sorted(ref.epm.config_methods), sorted(got.epm.config_methods),
             "config methods")
        ref, got = ref.programs, got.programs
    elif isinstance(ref, EdgeProgramManager):
        ref, got = dict(ref._edge_programs), dict(got._edge_programs)
    if isinstance(ref, ExportedProgram):
        ref, got = {"forward": ref}, {"forward": got}
    d.seq("programs", list(ref), list(got), "methods")
    for name in ref:
        if name in got:
            compare_exported_programs(d, name, ref[name], got[name])
    d.raise_if_any(header)


def _compare_input_mutation(d: Diffs, where: str, ref: ExportedProgram,
                            got: ExportedProgram) -> None:
    """What lowering left behind in the INPUT program (must match too)."""
    rc, gc = _Canon(), _Canon()
    d.eq(where, ref.graph_module.code, got.graph_module.code, "input graph code after lowering")
    d.seq(where, [repr(s) for s in ref.graph_signature.input_specs],
          [repr(s) for s in got.graph_signature.input_specs],
          "input program input_specs after lowering")
    d.seq(where, list(ref.state_dict), list(got.state_dict),
          "input program state_dict keys after lowering")
    d.eq(where, _tensor_dict(rc, ref.constants), _tensor_dict(gc, got.constants),
         "input program constants after lowering")
    d.eq(
        where,
        [(n.name, rc(n.meta.get("delegation_tag")), rc(n.meta.get("no_copy")))
         for n in ref.graph.nodes],
        [(n.name, gc(n.meta.get("delegation_tag")), gc(n.meta.get("no_copy")))
         for n in got.graph.nodes],
        "input program node tags after lowering",
    )


# --------------------------------------------------------------------------- #
# to_executorch / runtime
# --------------------------------------------------------------------------- #
def to_executorch(lowered: Lowered):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lowered.epm.to_executorch()


def assert_same_executorch(ref_et, got_et, *, header: str = "executorch program differs") -> None:
    d = Diffs()
    rc, gc = _Canon(), _Canon()
    d.eq("pte", bytes(ref_et.buffer), bytes(got_et.buffer), ".pte buffer")
    d.eq("pte", rc(ref_et.debug_handle_map), gc(got_et.debug_handle_map), "debug_handle_map")
    d.eq("pte", rc(ref_et.delegate_map), gc(got_et.delegate_map), "delegate_map")
    d.raise_if_any(header)


def run_in_runtime(et_program_manager, inputs: Sequence[Any], method: str = "forward") -> List[Any]:
    """Load the .pte buffer with executorch.runtime and run ``method``."""
    program = _Runtime.get().load_program(et_program_manager.buffer)
    m = program.load_method(method)
    if m is None:
        raise AssertionError(f"method {method!r} not in program {program.method_names}")
    outs = m.execute(list(inputs))
    # Output tensors alias the method's planned memory, which is freed with the
    # Method/Program: copy them while both are still alive (reading them later
    # gave garbage or a SIGBUS).
    result = [o.clone() if isinstance(o, torch.Tensor) else o for o in outs]
    del outs, m, program
    return result


def assert_close_outputs(expected: Sequence[Any], actual: Sequence[Any], what: str, atol=1e-4,
                         rtol=1e-4) -> None:
    exp = [e for e in expected]
    act = list(actual)
    if len(exp) != len(act):
        raise AssertionError(f"{what}: {len(exp)} expected outputs, got {len(act)}")
    for i, (e, a) in enumerate(zip(exp, act)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"{what}: output {i} is {type(a)}")
            if e.shape != a.shape or e.dtype != a.dtype:
                raise AssertionError(f"{what}: output {i} shape/dtype {tuple(a.shape)}/{a.dtype}"
                                     f" != {tuple(e.shape)}/{e.dtype}")
            # msg is called inside assert_close, in this iteration: i bound for clarity
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol,
                                       msg=lambda m, i=i: f"{what}: output {i}: {m}")
        elif e != a:
            raise AssertionError(f"{what}: output {i}: {a!r} != {e!r}")


def check_runtime(et_program_manager, built) -> None:
    for method, input_sets in built.inputs.items():
        for k, (inp, exp) in enumerate(zip(input_sets, built.expected[method])):
            out = run_in_runtime(et_program_manager, copy.deepcopy(inp), method)
            assert_close_outputs(exp, out, f"runtime {method}[{k}]")


def check_eager(lowered: Lowered) -> None:
    """Run the lowered program eagerly (delegates execute their
    original_module on CPU) and compare with the eager model."""
    built = lowered.built
    for method, input_sets in built.inputs.items():
        mod = lowered.epm.exported_program(method).module()
        for k, (inp, exp) in enumerate(zip(input_sets, built.expected[method])):
            with torch.no_grad():
                out = mod(*copy.deepcopy(inp))
            out = out if isinstance(out, (tuple, list)) else (out,)
            assert_close_outputs(exp, out, f"eager lowered {method}[{k}]")
