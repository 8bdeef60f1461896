"""Canonical partitioners' ``propose_partitions``, without transitive closures.

Twin of csrc/partition_capability.cpp (its algorithm lives in :mod:`.capability`) and
csrc/partition_group.cpp (the grouped algorithm lives here, in the same steps:
``_seed_partitions``, ``_PairMerge``, ``_reassign_getitems``).  Two algorithms
reproduce, exactly, the partitions of

* torch.fx ``CapabilityBasedPartitioner.propose_partitions`` (torch 2.13) and
* ExecuTorch ``GroupBasedPartitioner.propose_partitions`` (executorch 1.5.1),

on a flat encoding of the graph (node ``i`` is the i-th node of ``graph.nodes``):

* ``users_offsets``/``users``: CSR of ``node.users`` in its dict order;
* ``inputs_offsets``/``inputs``: CSR of ``node.all_input_nodes`` (grouped variant);
* ``is_getitem``: the node is a ``call_function`` of ``_operator.getitem``;
* ``supported``: ``operator_support.is_node_supported`` answered once per node;
* ``compute_weight``: what the node adds to the single-node filter's compute count
  (``call_function`` not in ``non_compute_ops``, plus one if in
  ``allowed_single_node_partition_ops``), 0..2;
* ``group_offsets``/``group_members``: CSR of ``node_groups`` in the iteration order of
  the reference's ``set(node_group)``.

Both return ``(ids, members, ordered_counts)``: per surviving partition, in the order
the reference returns them, its id, its node indices in the order of ``Partition.nodes``
and how many leading members carry a node order (``Partition.nodes[node]`` is
``len(nodes) - 1 - index`` for those, ``None`` for the rest).

Reachability is answered by breadth-first searches over the users/inputs lists
bounded by topological position instead of the reference's per-node
downstream/upstream sets, so memory is O(nodes + edges) (plus the capability
partitioner's own partition-to-partition map, which the reference keeps too).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

from .capability import propose_capability_partitions
from .partition_checks import _check_inputs, _check_nodes, _group_of_nodes

PartitionsResult = Tuple[List[int], List[List[int]], List[int]]

__all__ = ["propose_capability_partitions", "propose_group_partitions", "PartitionsResult"]


def _filter_single_node(parts: Dict[int, List[int]], compute_weight: Sequence[int],
                        allows_single_node_partition: bool) -> None:
    if allows_single_node_partition:
        return
    for pid in [p for p, nodes in parts.items() if sum(compute_weight[m] for m in nodes) <= 1]:
        del parts[pid]


# ----------------------------------------------------------------------------- grouped


def _seed_partitions(supported: Sequence[bool], group_of: List[int],
                     group_offsets: Sequence[int], group_members: Sequence[int],
                     assignment: List[int]) -> List[List[int]]:
    """One partition per supported node in reverse order: its group's supported members,
    or the node alone; fills ``assignment``."""
    parts: List[List[int]] = []
    for i in reversed(range(len(assignment))):
        if assignment[i] != -1 or not supported[i]:
            continue
        pid = len(parts)
        g = group_of[i]
        if g >= 0:
            nodes = [m for m in group_members[group_offsets[g]:group_offsets[g + 1]]
                     if supported[m]]
        else:
            nodes = [i]
        for m in nodes:
            assignment[m] = pid
        parts.append(nodes)
    return parts


Step = Callable[[int], Sequence[int]]


class _PairMerge:
    """The reference's pairwise merges: (p1, p2), p1 < p2 in id order, whenever the union
    is convex.  p1's strict descendants and ancestors are marked once per p1 (and grown on
    each merge)."""

    def __init__(self, users_of: Step, inputs_of: Step, parts: List[List[int]],
                 assignment: List[int]) -> None:
        n = len(assignment)
        self.users_of, self.inputs_of = users_of, inputs_of
        self.parts, self.assignment = parts, assignment
        self.n_parts = len(parts)
        self.alive = [True] * self.n_parts
        self.lo = [min(p) for p in parts]
        self.hi = [max(p) for p in parts]
        self.desc = [False] * n   # strict descendants of p1
        self.anc = [False] * n    # strict ancestors of p1
        self.seen = [0] * n
        self.stamp = 0

    def grow(self, marks: List[bool], p: int, step: Step) -> None:
        """Mark the strict descendants (via ``step``) of the nodes of partition ``p``."""
        stack = []
        for a in self.parts[p]:
            for y in step(a):
                if not marks[y]:
                    marks[y] = True
                    stack.append(y)
        while stack:
            x = stack.pop()
            for y in step(x):
                if not marks[y]:
                    marks[y] = True
                    stack.append(y)

    def escapes_and_returns(self, p1: int, p2: int, step: Step, hit: List[bool],
                            inside: Callable[[int], bool]) -> bool:
        """Search from p2 along ``step`` (users: forward, inputs: backward) through nodes
        outside the union, staying strictly inside the span (``inside``); true when it
        re-enters the union or meets a node marked in ``hit`` (an ancestor/descendant of
        p1 outside the union)."""
        assignment, seen = self.assignment, self.seen
        self.stamp += 1
        s = self.stamp
        stack = []
        for b in self.parts[p2]:
            for y in step(b):
                a = assignment[y]
                if a == p1 or a == p2:
                    continue
                if inside(y) and seen[y] != s:
                    seen[y] = s
                    stack.append(y)
        while stack:
            x = stack.pop()
            if hit[x]:
                return True
            for y in step(x):
                a = assignment[y]
                if a == p1 or a == p2:
                    return True
                if inside(y) and seen[y] != s:
                    seen[y] = s
                    stack.append(y)
        return False

    def convex(self, p1: int, p2: int, inside_outside: List[int]) -> bool:
        """The union of p1 and p2 is convex: no outside node between two of p1's nodes but
        p2's (``inside_outside``), and no path that leaves the union and comes back."""
        if any(self.assignment[x] != p2 for x in inside_outside):
            return False
        span_lo = min(self.lo[p1], self.lo[p2])
        span_hi = max(self.hi[p1], self.hi[p2])
        if self.escapes_and_returns(p1, p2, self.users_of, self.anc, lambda y: y < span_hi):
            return False
        return not self.escapes_and_returns(p1, p2, self.inputs_of, self.desc,
                                            lambda y: y > span_lo)

    def absorb(self, p1: int, p2: int) -> None:
        """p1 absorbs p2."""
        for m in self.parts[p2]:
            self.assignment[m] = p1
        self.parts[p1].extend(self.parts[p2])
        self.lo[p1] = min(self.lo[p1], self.lo[p2])
        self.hi[p1] = max(self.hi[p1], self.hi[p2])
        self.alive[p2] = False
        self.grow(self.desc, p2, self.users_of)
        self.grow(self.anc, p2, self.inputs_of)

    def merge_all(self) -> None:
        desc, anc, assignment = self.desc, self.anc, self.assignment
        for p1 in range(self.n_parts):
            if not self.alive[p1]:
                continue
            for i in range(len(desc)):
                desc[i] = anc[i] = False
            self.grow(desc, p1, self.users_of)
            self.grow(anc, p1, self.inputs_of)
            # nodes outside p1 on a path between two of its nodes (only an input group can
            # be non-convex; every merge yields a convex union)
            inside_outside = [i for i in range(self.lo[p1], self.hi[p1])
                              if desc[i] and anc[i] and assignment[i] != p1]
            for p2 in range(p1 + 1, self.n_parts):
                if not self.alive[p2] or not self.convex(p1, p2, inside_outside):
                    continue
                self.absorb(p1, p2)
                inside_outside = []


def _reassign_getitems(live: Dict[int, Dict[int, None]], assignment: List[int],
                       users_of: Step, is_getitem: Sequence[bool]) -> None:
    """The reference's getitem pass, once: a node whose users are all getitems takes them
    into its partition."""
    reassignment: Dict[int, int] = {}
    for i in range(len(assignment)):
        us = users_of(i)
        if all(is_getitem[u] for u in us):
            pid = assignment[i]
            if pid != -1:
                for u in us:
                    if assignment[u] != -1 and assignment[u] != pid:
                        reassignment[u] = pid
    for u, pid in reassignment.items():
        del live[assignment[u]][u]
        assignment[u] = pid
        live[pid][u] = None


def propose_group_partitions(users_offsets: Sequence[int], users: Sequence[int],
                             inputs_offsets: Sequence[int], inputs: Sequence[int],
                             is_getitem: Sequence[bool], supported: Sequence[bool],
                             compute_weight: Sequence[int], group_offsets: Sequence[int],
                             group_members: Sequence[int],
                             allows_single_node_partition: bool) -> PartitionsResult:
    """``GroupBasedPartitioner.propose_partitions`` on the flat encoding (see module doc).

    The reference merges partition pairs (p1, p2), p1 < p2 in id order, whenever the
    union's node set is convex (no path leaves it and comes back).  Here p1's strict
    descendants and ancestors are marked once per p1 (and grown on each merge); the
    union with p2 is then convex iff no node outside the union is a descendant and an
    ancestor of p1 alone, and no path leaves p2 and re-enters the union (a forward search
    from p2's users) or leaves the union and enters p2 (a backward search from p2's
    inputs); both searches stay inside the union's topological span.
    """
    n = _check_nodes(users_offsets, users, is_getitem, supported, compute_weight)
    _check_inputs(inputs_offsets, inputs, n)
    group_of = _group_of_nodes(group_offsets, group_members, n)

    def users_of(i: int) -> Sequence[int]:
        return users[users_offsets[i]:users_offsets[i + 1]]

    def inputs_of(i: int) -> Sequence[int]:
        return inputs[inputs_offsets[i]:inputs_offsets[i + 1]]

    assignment = [-1] * n
    parts = _seed_partitions(supported, group_of, group_offsets, group_members, assignment)
    merge = _PairMerge(users_of, inputs_of, parts, assignment)
    merge.merge_all()

    live: Dict[int, Dict[int, None]] = {p: dict.fromkeys(parts[p])
                                        for p in range(merge.n_parts) if merge.alive[p]}
    _reassign_getitems(live, assignment, users_of, is_getitem)

    out_parts = {pid: list(nodes) for pid, nodes in live.items()}
    _filter_single_node(out_parts, compute_weight, allows_single_node_partition)
    ids, members, ordered = [], [], []
    for pid, nodes in out_parts.items():
        if nodes:
            ids.append(pid)
            members.append(nodes)
            ordered.append(0)
    return ids, members, ordered
