"""Canonical partitioners' ``propose_partitions``, without transitive closures.

Twin of csrc/partition_capability.cpp (its algorithm lives in :mod:`.capability`) and
csrc/partition_group.cpp.  Two algorithms
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

from typing import Dict, List, Sequence, Tuple

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
    parts: List[List[int]] = []
    for i in reversed(range(n)):
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

    n_parts = len(parts)
    alive = [True] * n_parts
    lo = [min(p) for p in parts]
    hi = [max(p) for p in parts]
    desc = [False] * n   # strict descendants of p1
    anc = [False] * n    # strict ancestors of p1
    seen = [0] * n
    stamp = [0]

    def grow(marks: List[bool], starts, step) -> None:
        stack = [x for x in starts if not marks[x]]
        for x in stack:
            marks[x] = True
        while stack:
            x = stack.pop()
            for y in step(x):
                if not marks[y]:
                    marks[y] = True
                    stack.append(y)

    def leaves_and_returns(p1: int, p2: int, span_lo: int, span_hi: int) -> bool:
        # forward from p2's users: a node outside the union that reaches it
        stamp[0] += 1
        s = stamp[0]
        stack = []
        for b in parts[p2]:
            for y in users_of(b):
                a = assignment[y]
                if a == p1 or a == p2:
                    continue
                if y < span_hi and seen[y] != s:
                    seen[y] = s
                    stack.append(y)
        while stack:
            x = stack.pop()
            if anc[x]:
                return True
            for y in users_of(x):
                a = assignment[y]
                if a == p1 or a == p2:
                    return True
                if y < span_hi and seen[y] != s:
                    seen[y] = s
                    stack.append(y)
        # backward from p2's inputs: a node outside the union reached from it
        stamp[0] += 1
        s = stamp[0]
        for b in parts[p2]:
            for y in inputs_of(b):
                a = assignment[y]
                if a == p1 or a == p2:
                    continue
                if y > span_lo and seen[y] != s:
                    seen[y] = s
                    stack.append(y)
        while stack:
            x = stack.pop()
            if desc[x]:
                return True
            for y in inputs_of(x):
                a = assignment[y]
                if a == p1 or a == p2:
                    return True
                if y > span_lo and seen[y] != s:
                    seen[y] = s
                    stack.append(y)
        return False

    for p1 in range(n_parts):
        if not alive[p1]:
            continue
        for i in range(n):
            desc[i] = anc[i] = False
        grow(desc, (y for a in parts[p1] for y in users_of(a)), users_of)
        grow(anc, (y for a in parts[p1] for y in inputs_of(a)), inputs_of)
        # nodes outside p1 on a path between two of its nodes (only an input group can be
        # non-convex; every merge yields a convex union)
        inside_outside = [i for i in range(lo[p1], hi[p1])
                          if desc[i] and anc[i] and assignment[i] != p1]
        for p2 in range(p1 + 1, n_parts):
            if not alive[p2]:
                continue
            if any(assignment[x] != p2 for x in inside_outside):
                continue
            if leaves_and_returns(p1, p2, min(lo[p1], lo[p2]), max(hi[p1], hi[p2])):
                continue
            parts[p1].extend(parts[p2])
            for m in parts[p2]:
                assignment[m] = p1
            lo[p1] = min(lo[p1], lo[p2])
            hi[p1] = max(hi[p1], hi[p2])
            alive[p2] = False
            grow(desc, (y for b in parts[p2] for y in users_of(b)), users_of)
            grow(anc, (y for b in parts[p2] for y in inputs_of(b)), inputs_of)
            inside_outside = []

    live: Dict[int, Dict[int, None]] = {p: dict.fromkeys(parts[p])
                                        for p in range(n_parts) if alive[p]}
    reassignment: Dict[int, int] = {}
    for i in range(n):
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

    out_parts = {pid: list(nodes) for pid, nodes in live.items()}
    _filter_single_node(out_parts, compute_weight, allows_single_node_partition)
    ids, members, ordered = [], [], []
    for pid, nodes in out_parts.items():
        if nodes:
            ids.append(pid)
            members.append(nodes)
            ordered.append(0)
    return ids, members, ordered
