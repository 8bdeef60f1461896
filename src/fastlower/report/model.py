"""The delegation report's data: plain dataclasses, filled by ``collect`` and read by the
JSON, text and HTML writers (which live beside this module: it imports none of them).

A *node* here is a ``call_function`` node of the program handed to the
partitioner (the nodes a backend can take), in topological order, control-flow
bodies (``cond``/``map``/``scan``) right after the node that calls them.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Type, TypeVar

from ..base.records import TOP, partition_key

__all__ = ["TOP", "NodeRecord", "PartitionRecord", "OperatorRecord", "UndelegatedNode",
           "Coverage", "ReportData", "partition_key"]


@dataclass
class NodeRecord:
    """One ``call_function`` node, where it went, and what it computes."""

    index: int  # position in the report's topological order
    name: str
    op: str  # e.g. "aten.add.Tensor"
    shape: str  # e.g. "f32[1, 8, 64]", "" when the node has no tensor value
    graph: str  # "" for the top-level graph, else the body's path ("forward/true_graph_0")
    method: str = "forward"
    partition: Optional[str] = None  # the delegation tag, None when not delegated
    backend: Optional[str] = None


@dataclass
class PartitionRecord:
    """One partition (one delegate) of one graph."""

    tag: str
    backend: str
    method: str = "forward"
    graph: str = TOP
    node_count: int = 0
    ops: Dict[str, int] = field(default_factory=dict)  # op -> count
    inputs: List[str] = field(default_factory=list)  # outside nodes the partition reads
    outputs: List[str] = field(default_factory=list)  # its nodes read outside it
    constant_bytes: int = 0  # bytes of the parameters, buffers and constants it owns
    processed_bytes: Optional[int] = None  # size of the backend's blob; None in a preview
    preprocess_seconds: float = 0.0  # time in the backend's preprocess for this partition
    # set by the preprocess cache; None while no cache took part
    cache_hit: Optional[bool] = None

    @property
    def key(self) -> str:
        """Unique within a report: method, graph and tag."""
        return partition_key(self.method, self.graph, self.tag)


@dataclass
class OperatorRecord:
    """How many nodes of one operator were delegated, to which backend, and how many not."""

    op: str
    delegated: int = 0
    not_delegated: int = 0
    by_backend: Dict[str, int] = field(default_factory=dict)


@dataclass
class UndelegatedNode:
    """A node left out of every partition, and the partitions next to it."""

    name: str
    op: str
    graph: str = TOP
    method: str = "forward"
    adjacent_partitions: List[str] = field(default_factory=list)  # keys of PartitionRecords


@dataclass
class Coverage:
    """Delegated over all ``call_function`` nodes and over all unique operators."""

    delegated_nodes: int = 0
    total_nodes: int = 0
    delegated_ops: int = 0
    total_ops: int = 0

    @property
    def node_share(self) -> float:
        return self.delegated_nodes / self.total_nodes if self.total_nodes else 0.0

    @property
    def op_share(self) -> float:
        return self.delegated_ops / self.total_ops if self.total_ops else 0.0


_R = TypeVar("_R", bound="ReportData")


@dataclass
class ReportData:
    """What one lowering delegated, what it left out, and where the time went: the data
    of a ``fastlower.report.LoweringReport`` (which adds its renderings).

    The first fields are the original report's (``partitions`` is a count per
    backend); the ``*_records``, ``operators``, ``not_delegated`` and ``nodes``
    fields are the full picture (see ``fastlower.report``).
    """

    started: float = 0.0
    phases: Dict[str, float] = field(default_factory=dict)
    partitions: Dict[str, int] = field(default_factory=dict)  # backend id -> count
    delegated_nodes: int = 0
    total_nodes: int = 0
    seconds: float = 0.0
    # time inside the phases spent in code fastlower calls but does not own
    # ("partitioner": the partitioner's __call__, "backend": preprocess or
    # preprocess_multimethod)
    external: Dict[str, float] = field(default_factory=dict)
    preview: bool = False  # True: partitioner only, no backend ran (``build_report``)
    methods: List[str] = field(default_factory=list)
    nodes: List[NodeRecord] = field(default_factory=list)
    partition_records: List[PartitionRecord] = field(default_factory=list)
    operators: List[OperatorRecord] = field(default_factory=list)
    not_delegated: List[UndelegatedNode] = field(default_factory=list)
    # where preprocess ran ("serial", "fork pool, N workers", "executor <type>"),
    # preprocess-cache hits and misses per backend id, and the time spent on keys
    preprocess_runner: str = ""
    cache_hits: Dict[str, int] = field(default_factory=dict)
    cache_misses: Dict[str, int] = field(default_factory=dict)
    cache_key_seconds: float = 0.0
    # partitions of one structure (``fastlower.preprocess.structure``): {classes, derived, verified,
    # fallbacks [{tag, why}]}, summed over the lowering's preprocess batches
    preprocess_classes: Dict[str, Any] = field(default_factory=dict)
    # one record per preprocessed partition, in the reference's order: {tag, backend,
    # method, preprocess_seconds, cache_hit (None: not cached)}
    preprocess_records: List[Dict[str, object]] = field(default_factory=list)
    # the lowering cache (``fastlower.cache``) of ``to_edge_transform_and_lower``: None when
    # it took no part, else "hit" (this report was read off the cached programs), "refit"
    # (a new checkpoint of a cached structure, ``fastlower.cache.refit``), "miss"
    # (lowered and stored), "verified" (verify mode: lowered, equal to the entry) or
    # "uncacheable" (an input has no canonical form); its key and its time per step
    lowering_cache: Optional[str] = None
    lowering_cache_key: str = ""
    lowering_cache_seconds: Dict[str, float] = field(default_factory=dict)
    # a new checkpoint of a lowered structure (``fastlower.cache.refit``): {source (the
    # entry refit), tensors, changed, delegates, remade, templates, reused [stages]} when
    # the lowering was refit, {source, refused (why)} when a structure matched but could
    # not be refit; empty otherwise
    refit: Dict[str, Any] = field(default_factory=dict)
    # the edge stage's retraces (``fastlower.in_process.edge``): {skipped, run, reasons [why each
    # ran]} when fastlower ran the edge stage of this lowering; empty otherwise
    edge_retraces: Dict[str, Any] = field(default_factory=dict)
    # peak resident set, in bytes, from the process's start to the end of this lowering:
    # this process's and its largest waited-for child's (preprocess workers, a cache
    # store's child), from ``getrusage`` (``report.memory.record_peak``); 0: not measured
    peak_rss_bytes: int = 0
    children_peak_rss_bytes: int = 0
    # things the reader should know about the program lowered, one line each (a
    # type of its inputs or outputs replaced by a stand-in when it was loaded)
    notes: List[str] = field(default_factory=list)
    # per partition object id, filled while lowering, read by ``partition_timing``
    _preprocess_seconds: Dict[int, float] = field(default_factory=dict, repr=False)
    _cache_hits: Dict[int, bool] = field(default_factory=dict, repr=False)

    @classmethod
    def start(cls: Type[_R]) -> _R:
        return cls(started=time.perf_counter())

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = now - self.started - sum(self.phases.values())

    @contextmanager
    def external_time(self, what: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.external[what] = self.external.get(what, 0.0) + time.perf_counter() - start

    @contextmanager
    def preprocess_time(self, partitions: Iterable[object]) -> Iterator[None]:
        """Time one backend call that preprocesses ``partitions`` (shared evenly among them)."""
        parts = list(partitions)
        start = time.perf_counter()
        try:
            with self.external_time("backend"):
                yield
        finally:
            share = (time.perf_counter() - start) / max(len(parts), 1)
            for part in parts:
                self._preprocess_seconds[id(part)] = (
                    self._preprocess_seconds.get(id(part), 0) + share)

    def record_preprocess(self, partition: object, backend: str, seconds: float,
                          cache_hit: Optional[bool], tag: str = "", method: str = "") -> None:
        """One partition's preprocess: its time, and whether the cache answered (None: no cache)."""
        self.preprocess_records.append({"tag": tag, "backend": backend, "method": method,
                                        "preprocess_seconds": seconds, "cache_hit": cache_hit})
        self._preprocess_seconds[id(partition)] = self._preprocess_seconds.get(id(partition), 0.0) \
            + seconds
        if cache_hit is not None:
            self._cache_hits[id(partition)] = cache_hit
            counts = self.cache_hits if cache_hit else self.cache_misses
            counts[backend] = counts.get(backend, 0) + 1

    @property
    def own_seconds(self) -> float:
        """The lowering machinery's time: the total minus partitioner and backend time."""
        return self.seconds - sum(self.external.values())

    def partition_timing(self, partition: object) -> Tuple[float, Optional[bool]]:
        """The preprocess seconds and cache answer recorded for ``partition`` (the
        lowering's own partition object) while lowering."""
        return self._preprocess_seconds.get(id(partition), 0.0), self._cache_hits.get(id(partition))

    def drop_partition_timing(self) -> None:
        """Forget the per-partition timings (the ids they are keyed by die with the lowering)."""
        self._preprocess_seconds.clear()
        self._cache_hits.clear()

    @property
    def delegated_share(self) -> float:
        return self.delegated_nodes / self.total_nodes if self.total_nodes else 0.0

    @property
    def coverage(self) -> Coverage:
        """Coverage over every node of every method (control-flow bodies included)."""
        return _coverage(self.nodes, None)

    def coverage_by_backend(self) -> Dict[str, Coverage]:
        """Per backend: its nodes and its unique operators over all nodes and operators."""
        backends = sorted({n.backend for n in self.nodes if n.backend is not None})
        return {b: _coverage(self.nodes, b) for b in backends}

    def format(self) -> str:
        """A short plain summary (the original report's four lines)."""
        parts = ", ".join(f"{b}: {n}" for b, n in self.partitions.items()) or "none"
        phases = ", ".join(f"{k} {v:.3f}s" for k, v in self.phases.items())
        external = "".join(f", {k} {v:.3f}s" for k, v in self.external.items())
        return (f"partitions: {parts}\n"
                f"delegated call_function nodes: {self.delegated_nodes}/{self.total_nodes} "
                f"({100 * self.delegated_share:.1f}%)\n"
                f"fastlower time: {self.seconds:.3f}s ({phases})\n"
                f"  of which: lowering machinery {self.own_seconds:.3f}s{external}"
                + self._format_preprocess() + self._format_lowering_cache())

    def _format_lowering_cache(self) -> str:
        retraces = f"\n{retraces_line(self.edge_retraces)}" if self.edge_retraces else ""
        if self.lowering_cache is None:
            return retraces
        steps = ", ".join(f"{k} {v:.3f}s" for k, v in self.lowering_cache_seconds.items())
        return (f"\nlowering cache: {self.lowering_cache}" + (f" ({steps})" if steps else "")
                + (f"\n{refit_line(self.refit)}" if self.refit else "") + retraces)

    def record_classes(self, stats: Dict[str, Any]) -> None:
        """Add one preprocess batch's structural-class counts (``ClassStats.as_dict``);
        a batch where no class formed adds nothing."""
        if not stats.get("classes") and not stats.get("fallbacks"):
            return
        mine = self.preprocess_classes
        for name in ("classes", "derived", "verified"):
            mine[name] = mine.get(name, 0) + int(stats.get(name, 0))
        mine.setdefault("fallbacks", []).extend(stats.get("fallbacks", []))

    def classes_line(self) -> str:
        """:func:`classes_text` of the lowering's summed counts."""
        return classes_text(self.preprocess_classes)

    def _format_preprocess(self) -> str:
        if not self.preprocess_runner:
            return ""
        text = f"\npreprocess: {self.preprocess_runner}"
        backends = list(dict.fromkeys(list(self.cache_hits) + list(self.cache_misses)))
        if backends:
            text += "; cache: " + ", ".join(
                f"{b} {self.cache_hits.get(b, 0)} hits / {self.cache_misses.get(b, 0)} misses"
                for b in backends) + f" (keys {self.cache_key_seconds:.3f}s)"
        if self.classes_line():
            text += f"\n{self.classes_line()}"
        return text


def classes_text(counts: Dict[str, Any]) -> str:
    """``structure: N classes, M partitions derived, K verified, F preprocessed instead
    (why)`` for counts as ``ClassStats.as_dict`` gives them, or ``""`` when no class formed."""
    if not counts.get("classes"):
        return ""
    text = (f"structure: {counts['classes']} classes, {counts['derived']} partitions derived, "
            f"{counts['verified']} verified")
    fallbacks = counts.get("fallbacks", [])
    if fallbacks:
        text += f", {len(fallbacks)} preprocessed instead ({fallbacks[0]['why']})"
    return text


def _coverage(nodes: List[NodeRecord], backend: Optional[str]) -> Coverage:
    all_ops = {n.op for n in nodes}
    if backend is None:
        taken = [n for n in nodes if n.partition is not None]
    else:
        taken = [n for n in nodes if n.backend == backend]
    return Coverage(delegated_nodes=len(taken), total_nodes=len(nodes),
                    delegated_ops=len({n.op for n in taken}), total_ops=len(all_ops))


def retraces_line(retraces: Dict[str, Any]) -> str:
    """``edge stage: N retraces skipped (K repeating an earlier one), M run (why the
    first ran)``."""
    reasons = retraces.get("reasons", [])
    repeats = retraces.get("repeats", 0)
    return (f"edge stage: {retraces.get('skipped', 0)} retraces skipped"
            + (f" ({repeats} repeating an earlier one)" if repeats else "")
            + f", {retraces.get('run', 0)} run" + (f" ({reasons[0]})" if reasons else ""))


def refit_line(refit: Dict[str, Any]) -> str:
    """One line about a refit (:attr:`LoweringReport.refit`)."""
    if "refused" in refit:
        return f"refit: not possible ({refit['refused']})"
    return (f"refit: {refit.get('changed', 0)} of {refit.get('tensors', 0)} constants changed, "
            f"{refit.get('remade', 0)} of {refit.get('delegates', 0)} delegates re-made; reused: "
            + ", ".join(refit.get("reused", [])))
