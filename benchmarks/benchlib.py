"""Shared pieces of the lowering benchmarks.

* programs: one pristine Edge program per layer count, deep-copied for every
  timed call (the reference mutates its input's constants dict);
* partitioners: XNNPACK (timed), a pre-tagged partitioner that re-applies
  known tags at zero partitioning cost, and the single-op "many partitions" cut;
* :class:`FastlowerBenchNoopBackend`: a backend whose ``preprocess`` does nothing;
* peak-RSS measurement around one call (see :class:`PeakRss`).
"""

from __future__ import annotations

import copy
import ctypes
import gc
import threading
import time
from typing import Dict, List, Mapping, Optional, Tuple, final

import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from torch.export import ExportedProgram

# --------------------------------------------------------------------------- backend


@final
class FastlowerBenchNoopBackend(BackendDetails):
    """Trivial backend: isolates the lowering machinery from any real compiler."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        return PreprocessResult(processed_bytes=b"x")


NOOP_BACKEND_ID = FastlowerBenchNoopBackend.__name__

# --------------------------------------------------------------------------- timing hooks


class Stopwatch:
    """Accumulates wall time spent inside wrapped callables (XNNPACK preprocess / partition)."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}

    def reset(self) -> None:
        self.seconds = {}

    def add(self, key: str, dt: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + dt


STOPWATCH = Stopwatch()
_XNN_PATCHED = False


def patch_xnnpack_preprocess_timer() -> None:
    """Wrap ``XnnpackBackend.preprocess`` to accumulate its time in ``STOPWATCH``.

    Both implementations look the class up by name and call ``cls.preprocess``,
    so the wrapper sees every call of either. Overhead: two perf_counter calls.
    """
    global _XNN_PATCHED
    if _XNN_PATCHED:
        return
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend

    inner = XnnpackBackend.__dict__["preprocess"].__func__

    def preprocess(edge_program, compile_specs):
        t = time.perf_counter()
        try:
            return inner(edge_program, compile_specs)
        finally:
            STOPWATCH.add("xnnpack_preprocess", time.perf_counter() - t)

    XnnpackBackend.preprocess = staticmethod(preprocess)
    _XNN_PATCHED = True


_VERIFIER_PATCHED = False


def patch_verifier_timer() -> None:
    """Wrap ``ExportedProgram._validate`` (every verifier run, by either
    implementation or a backend) to accumulate its time in ``STOPWATCH``."""
    global _VERIFIER_PATCHED
    if _VERIFIER_PATCHED:
        return
    inner = ExportedProgram._validate

    def _validate(self):
        t = time.perf_counter()
        try:
            return inner(self)
        finally:
            STOPWATCH.add("verifier", time.perf_counter() - t)

    ExportedProgram._validate = _validate
    _VERIFIER_PATCHED = True


def timed_xnnpack_partitioner():
    """An ``XnnpackPartitioner`` whose ``partition()`` time goes to ``STOPWATCH``."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    class TimedXnnpackPartitioner(XnnpackPartitioner):
        def partition(self, exported_program):
            t = time.perf_counter()
            try:
                return super().partition(exported_program)
            finally:
                STOPWATCH.add("partition", time.perf_counter() - t)

    return TimedXnnpackPartitioner()


# --------------------------------------------------------------------------- partitioners


class PretaggedPartitioner(Partitioner):
    """Re-applies a fixed ``node name -> tag`` map; every tag goes to the no-op backend.

    Partitioning cost is one pass over the nodes (no support checks, no
    capability-based grouping), so the time measured is the lowering machinery's.
    """

    def __init__(self, tags: Mapping[str, str], label: str = "pretagged") -> None:
        super().__init__()
        self.tags = dict(tags)
        self.tag_names = sorted(set(self.tags.values()), key=_tag_sort_key)
        self.label = label

    def __repr__(self) -> str:
        return f"PretaggedPartitioner({self.label}, {len(self.tag_names)} tags)"

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        t = time.perf_counter()
        tags = self.tags
        for node in exported_program.graph.nodes:
            tag = tags.get(node.name)
            if tag is not None:
                node.meta["delegation_tag"] = tag
        spec = DelegationSpec(NOOP_BACKEND_ID, [])
        result = PartitionResult(tagged_exported_program=exported_program,
                                 partition_tags={t: spec for t in self.tag_names})
        STOPWATCH.add("partition", time.perf_counter() - t)
        return result


def _tag_sort_key(tag: str):
    digits = "".join(c for c in tag if c.isdigit())
    return (int(digits) if digits else -1, tag)


def xnnpack_tags(program: ExportedProgram) -> Dict[str, str]:
    """Run ``XnnpackPartitioner.partition`` once (on a copy) and read back each node's tag."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    work = copy.deepcopy(program)
    result = XnnpackPartitioner().partition(work)
    tagged = result.tagged_exported_program
    return {n.name: n.meta["delegation_tag"] for n in tagged.graph.nodes
            if n.meta.get("delegation_tag") is not None}


def single_op_tags(program: ExportedProgram) -> Dict[str, str]:
    """Each call_function node its own tag (``getitem`` joins its producer).

    A constant placeholder (parameter / buffer / lifted constant) joins its
    users' tag when all of its users have the same one, as ``tag_constant_data``
    would; constants shared across partitions (RoPE tables, mask) stay untagged,
    i.e. become delegate inputs.
    """
    import operator

    tags: Dict[str, str] = {}
    k = 0
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:
            tags[node.name] = tags[node.args[0].name]
            continue
        tags[node.name] = f"tag{k}"
        k += 1
    sig = program.graph_signature
    constant_inputs = (set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers)
                       | set(sig.inputs_to_lifted_tensor_constants))
    mutated = set(sig.buffers_to_mutate.values())
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in constant_inputs:
            continue
        if sig.inputs_to_buffers.get(node.name) in mutated:
            continue
        user_tags = {tags.get(u.name) for u in node.users}
        if len(user_tags) == 1 and None not in user_tags:
            tags[node.name] = user_tags.pop()
    return tags


def check_convex(program: ExportedProgram, tags: Mapping[str, str]) -> int:
    """Assert every tag group is convex (no path leaves the group and re-enters it).

    Returns the number of groups. Linear: one forward pass computing, per node,
    the set of groups it is reachable from *through a node outside the group*.
    """
    nodes = list(program.graph.nodes)
    group_of = {n: tags.get(n.name) for n in nodes}
    # escaped[n]: groups g such that some path g -> (non-g node)... -> n exists
    escaped: Dict[torch.fx.Node, frozenset] = {}
    empty: frozenset = frozenset()
    for n in nodes:
        acc = set()
        for p in n.all_input_nodes:
            acc |= escaped.get(p, empty)
            gp = group_of[p]
            if gp is not None and gp != group_of[n]:
                acc.add(gp)  # leaving group gp along edge p -> n
        g = group_of[n]
        if g is not None and g in acc:
            raise AssertionError(f"partition {g!r} is not convex: node {n.name} is reachable "
                                 "from the partition through a node outside it")
        escaped[n] = frozenset(acc) if acc else empty
    return len({g for g in group_of.values() if g is not None})


def call_function_count(program: ExportedProgram) -> int:
    return sum(1 for n in program.graph.nodes if n.op == "call_function")


# --------------------------------------------------------------------------- programs


class ProgramCache:
    """One pristine program per layer count (the most recent size only).

    Callers never lower the pristine program: :meth:`fresh` hands out a deep copy.
    """

    def __init__(self) -> None:
        self._key: Optional[int] = None
        self._program: Optional[ExportedProgram] = None
        self._tags: Dict[str, Dict[str, str]] = {}
        self.export_seconds: Dict[int, float] = {}

    def pristine(self, n_layers: int) -> ExportedProgram:
        if self._key != n_layers:
            from fastlower.frontends.examples.llama import edge_llama

            self._program = None
            self._tags = {}
            gc.collect()
            t = time.perf_counter()
            self._program, _ = edge_llama(n_layers)
            self.export_seconds[n_layers] = time.perf_counter() - t
            self._key = n_layers
        return self._program

    def fresh(self, n_layers: int) -> ExportedProgram:
        return copy.deepcopy(self.pristine(n_layers))

    def tags(self, n_layers: int, kind: str) -> Dict[str, str]:
        program = self.pristine(n_layers)
        if kind not in self._tags:
            tags = xnnpack_tags(program) if kind == "xnnpack" else single_op_tags(program)
            check_convex(program, tags)
            self._tags[kind] = tags
        return self._tags[kind]


class XnnpackAddsPartitioner(Partitioner):
    """Only the ``add`` nodes, each maximal group its own XNNPACK partition: the first
    partitioner of the chained-lowering case (the second, ``XnnpackPartitioner``,
    lowers what is left to a program that already holds delegates)."""

    def __init__(self) -> None:
        super().__init__()
        from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend

        self.delegation = DelegationSpec(XnnpackBackend.__name__, [])

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
            generate_pattern_op_partitions,
        )
        from executorch.exir.dialects._ops import ops as exir_ops
        from torch.fx.passes.operator_support import OperatorSupportBase

        class Adds(OperatorSupportBase):
            def is_node_supported(self, submodules, node) -> bool:
                return node.op == "call_function" and node.target == exir_ops.edge.aten.add.Tensor

        tags = {}
        for i, part in enumerate(generate_pattern_op_partitions(
                exported_program.graph_module, op_support=Adds())):
            for node in part.nodes:
                node.meta["delegation_tag"] = f"add{i}"
            tags[f"add{i}"] = self.delegation
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


class Chain(list):
    """Partitioners applied one after another, each to the previous lowering's result."""


def chained_xnnpack() -> Chain:
    return Chain([XnnpackAddsPartitioner(), timed_xnnpack_partitioner()])


# --------------------------------------------------------------------------- memory

_libc = None


def malloc_trim() -> None:
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL("libc.so.6")
        _libc.malloc_trim(0)
    except OSError:  # not glibc
        pass


def _status_kib(*keys: str) -> Dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in keys:
                out[k] = int(v.split()[0])
    return out


def _can_reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        s = _status_kib("VmHWM", "VmRSS")
        return s["VmHWM"] <= s["VmRSS"] + 1024  # reset took effect
    except OSError:
        return False


class PeakRss:
    """Peak RSS growth of this process during one call.

    Method: before the call (outside the timed region) ``gc.collect()`` and
    ``malloc_trim(0)`` hand freed memory back to the OS; right before the call
    the kernel's high-water mark is reset (``echo 5 > /proc/self/clear_refs``,
    Linux >= 4.0) and the baseline ``VmRSS`` read; right after it ``VmHWM`` is
    read. growth = VmHWM_after - VmRSS_before (the kernel tracks the peak
    exactly, no sampling). Where the reset is unavailable a thread samples
    ``VmRSS`` every 2 ms instead (``method`` says which was used).
    """

    HWM_RESET = None  # decided on first use

    def __init__(self) -> None:
        if PeakRss.HWM_RESET is None:
            PeakRss.HWM_RESET = _can_reset_hwm()
        self.method = "vmhwm-reset" if PeakRss.HWM_RESET else "sampling-2ms"
        self.baseline_kib = 0
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @staticmethod
    def prepare() -> None:
        gc.collect()
        malloc_trim()

    def __enter__(self) -> "PeakRss":
        if PeakRss.HWM_RESET:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.baseline_kib = _status_kib("VmRSS")["VmRSS"]
        else:
            self.baseline_kib = self.peak_kib = _status_kib("VmRSS")["VmRSS"]
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak_kib = max(self.peak_kib, _status_kib("VmRSS")["VmRSS"])

    def __exit__(self, *exc) -> None:
        if PeakRss.HWM_RESET:
            self.peak_kib = _status_kib("VmHWM")["VmHWM"]
        else:
            self._stop.set()
            self._thread.join()
            self.peak_kib = max(self.peak_kib, _status_kib("VmRSS")["VmRSS"])

    @property
    def growth_mib(self) -> float:
        return max(0, self.peak_kib - self.baseline_kib) / 1024.0



def _available_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise RuntimeError("/proc/meminfo has no MemAvailable")


class MachinePeak:
    """Peak growth of the whole machine's memory in use during one call, sampled.

    ``PeakRss`` sees this process only; forked preprocess workers hold their own
    copies of their partitions' tensors (and share the rest copy-on-write, which
    per-process RSS would count once per worker). The machine's ``MemAvailable``
    counts each page once, whichever process holds it: growth = available before
    - the lowest available seen (sampled every 2 ms). Other work on the machine
    adds to it, so measure on a quiet machine.
    """

    def __init__(self) -> None:
        self.baseline_kib = 0
        self.lowest_kib = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "MachinePeak":
        self.baseline_kib = self.lowest_kib = _available_kib()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.lowest_kib = min(self.lowest_kib, _available_kib())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.lowest_kib = min(self.lowest_kib, _available_kib())

    @property
    def growth_mib(self) -> float:
        return max(0, self.baseline_kib - self.lowest_kib) / 1024.0

# --------------------------------------------------------------------------- results


def lowered_modules(program: ExportedProgram):
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    return [m for _, m, _ in get_lowered_submodules(program.graph_module)]


def fingerprint(program: ExportedProgram) -> Tuple[str, str, Tuple]:
    """What must agree between the reference's and fastlower's output."""
    mods = tuple((m.backend_id, len(m.processed_bytes),
                  call_function_count(m.original_module)) for m in lowered_modules(program))
    return program.graph_module.code, str(program.graph_signature), mods


def describe_mismatch(ref, ours) -> str:
    names = ("graph code", "graph signature", "lowered modules")
    for name, a, b in zip(names, ref, ours):
        if a == b:
            continue
        if isinstance(a, str):
            la, lb = a.splitlines(), b.splitlines()
            for i, (x, y) in enumerate(zip(la, lb)):
                if x != y:
                    return (f"{name} differs at line {i}: ref {x.strip()!r} "
                            f"vs fastlower {y.strip()!r}")
            return f"{name} differs in length: {len(la)} vs {len(lb)} lines"
        return f"{name} differ: ref {len(a)} vs fastlower {len(b)} (first diff: " + next(
            (f"#{i} {x} vs {y}" for i, (x, y) in enumerate(zip(a, b)) if x != y), "length") + ")"
    return ""
