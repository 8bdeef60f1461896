"""What was delegated: a small report attached to each lowering."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

_LAST: List["LoweringReport"] = []


@dataclass
class LoweringReport:
    """Partitions per backend, delegated node share and where the time went."""

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
    # --- preprocess (fastlower.preprocess, issue 9) -----------------------------------
    # where preprocess ran ("serial", "fork pool, N workers", "executor <type>");
    # one record per partition in the reference's order: {tag, backend, method,
    # preprocess_seconds, cache_hit (None: not cached)}; hits/misses per backend id
    preprocess_runner: str = ""
    preprocess_records: List[Dict[str, object]] = field(default_factory=list)
    cache_hits: Dict[str, int] = field(default_factory=dict)
    cache_misses: Dict[str, int] = field(default_factory=dict)
    cache_key_seconds: float = 0.0

    def record_preprocess(self, tag: str, backend: str, method: str, seconds: float,
                          cache_hit: Optional[bool]) -> None:
        self.preprocess_records.append({"tag": tag, "backend": backend, "method": method,
                                        "preprocess_seconds": seconds, "cache_hit": cache_hit})
        if cache_hit is not None:
            counts = self.cache_hits if cache_hit else self.cache_misses
            counts[backend] = counts.get(backend, 0) + 1

    def _format_preprocess(self) -> str:
        if not self.preprocess_runner:
            return ""
        text = f"\npreprocess: {self.preprocess_runner}"
        backends = list(dict.fromkeys(list(self.cache_hits) + list(self.cache_misses)))
        if backends:
            text += "; cache: " + ", ".join(
                f"{b} {self.cache_hits.get(b, 0)} hits / {self.cache_misses.get(b, 0)} misses"
                for b in backends) + f" (keys {self.cache_key_seconds:.3f}s)"
        return text
    # --- end preprocess -------------------------------------------------------------

    @classmethod
    def start(cls) -> "LoweringReport":
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

    @property
    def own_seconds(self) -> float:
        """The lowering machinery's time: the total minus partitioner and backend time."""
        return self.seconds - sum(self.external.values())

    def finish(self, program, lowerings) -> None:
        self.mark("apply")
        self.seconds = sum(self.phases.values())  # the phases cover the whole call
        for lowering in lowerings:
            for part in lowering.partitions:
                backend = lowering.result.partition_tags[part.tag].backend_id
                self.partitions[backend] = self.partitions.get(backend, 0) + 1
                self.delegated_nodes += sum(
                    1 for n in part.program.graph.nodes if n.op == "call_function")
            self.total_nodes += sum(1 for n in lowering.original.graph.nodes
                                    if n.op == "call_function")
        _LAST[:] = [self]

    @property
    def delegated_share(self) -> float:
        return self.delegated_nodes / self.total_nodes if self.total_nodes else 0.0

    def format(self) -> str:
        parts = ", ".join(f"{b}: {n}" for b, n in self.partitions.items()) or "none"
        phases = ", ".join(f"{k} {v:.3f}s" for k, v in self.phases.items())
        external = "".join(f", {k} {v:.3f}s" for k, v in self.external.items())
        return (f"partitions: {parts}\n"
                f"delegated call_function nodes: {self.delegated_nodes}/{self.total_nodes} "
                f"({100 * self.delegated_share:.1f}%)\n"
                f"fastlower time: {self.seconds:.3f}s ({phases})\n"
                f"  of which: lowering machinery {self.own_seconds:.3f}s{external}"
                + self._format_preprocess())


def last_report() -> Optional[LoweringReport]:
    """The report of the most recent ``to_backend`` call in this process."""
    return _LAST[0] if _LAST else None
