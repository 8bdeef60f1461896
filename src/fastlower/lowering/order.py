"""Which error a lowering raises, and at which point of its work.

The reference works partition by partition, so of several broken rules (or a
broken rule and a failing backend) it raises the one its order of work meets
first. fastlower plans every partition before it builds any: the plan records
where each broken rule is met (:class:`fastlower.core.plan.PlanStop`), and the
lowering raises it only after the partitions before that point have gone as far
as the reference takes them. :class:`ErrorOrder` is the one place that records
such a point and raises its error; the two paths only ask it.

The points, in the reference's order of work on one partition (``plan.FUSE``,
``plan.PROGRAM``, ``plan.INSERT``):

- fusing its nodes (cycle, no output, tagged output or user input, a shared
  constant's duplication): found while planning;
- building its program (an owned buffer update also returned: planning; the
  verifier rejecting the partition program: :meth:`ErrorOrder.program_rejected`;
  single-program path, its backend not found: :meth:`ErrorOrder.backend_missing`);
- its ``preprocess`` (raised by ``preprocess.partitions`` itself, the earliest
  partition's first);
- inserting its delegate (an owned buffer update read outside it): single-program
  path, right after its own preprocess (``PlanStop.stage == INSERT``, so that
  partition is built and preprocessed first); multi-method path, after every
  backend up to its own has preprocessed (:meth:`ErrorOrder.insert_stop`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from ..core.plan import INSERT, PROGRAM, GraphPlan, PlanStop

if TYPE_CHECKING:
    from .apply import GraphBuilder, Partition


class ErrorOrder:
    """One method's pending error and the point of the reference's work where it is met.

    Made from the method's plan (the first broken rule planning met); the lowering
    adds what only building or preprocessing finds, always an earlier point than
    the one pending (only partitions before the pending point are built or
    preprocessed).
    """

    def __init__(self, plan: GraphPlan) -> None:
        # the first error in the reference's order of work, raised once every
        # partition before it has gone as far as the reference takes it
        self.stop: Optional[PlanStop] = plan.stop
        # multi-method path only: an owned buffer update read outside its delegate,
        # met inserting that delegate, after its backend's preprocess
        self.insert_stop: Optional[PlanStop] = plan.after_preprocess

    # -- building partition programs --------------------------------------------
    def partitions_to_build(self, builder: GraphBuilder) -> int:
        """How many of ``builder``'s partitions the reference builds before the stop."""
        stop = self.stop
        if stop is None or stop.graph is not builder.plan:
            return len(builder.graph.partitions)
        # a delegate's insertion comes after its program is built (and preprocessed)
        return stop.pid + 1 if stop.stage == INSERT else stop.pid

    def stops_in(self, builder: GraphBuilder) -> bool:
        """Does the stop lie in ``builder``'s graph (no later graph is built)?"""
        return self.stop is not None and self.stop.graph is builder.plan

    def program_rejected(self, error: BaseException, builder: GraphBuilder, pid: int) -> None:
        """The verifier rejected partition ``pid``'s program: the reference raises that
        building it, before any later partition is fused."""
        self.stop = PlanStop(error, PROGRAM, builder.plan, pid)

    # -- preprocess -------------------------------------------------------------
    def backend_missing(self, error: BaseException, part: Partition) -> None:
        """Single-program path: the reference looks the backend up when it reaches the
        partition's preprocess, after every earlier partition's preprocess."""
        self.stop = PlanStop(error, PROGRAM, part.builder.plan, part.pid)

    def raise_pending(self) -> None:
        """Raise the pending error, if any (the caller is at its point of the work)."""
        if self.stop is not None:
            raise self.stop.error

    # -- inserting delegates (multi-method path) ----------------------------------
    def insert_stop_partition(self, parts: Sequence[Partition]) -> Optional[Partition]:
        """The partition (of ``parts``) whose delegate's insertion meets :attr:`insert_stop`."""
        stop = self.insert_stop
        if stop is None:
            return None
        return next(p for p in parts if p.builder.plan is stop.graph and p.pid == stop.pid)
