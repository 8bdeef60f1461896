"""Canonical partitioners' ``propose_partitions``, without transitive closures.

Twin of csrc/partition_capability.cpp and csrc/partition_group.cpp.  Two algorithms
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

from typing import Dict, List, Sequence, Set, Tuple

from .partition_checks import _check_inputs, _check_nodes, _group_of_nodes

PartitionsResult = Tuple[List[int], List[List[int]], List[int]]


def _filter_single_node(parts: Dict[int, List[int]], compute_weight: Sequence[int],
                        allows_single_node_partition: bool) -> None:
    if allows_single_node_partition:
        return
    for pid in [p for p, nodes in parts.items() if sum(compute_weight[m] for m in nodes) <= 1]:
        del parts[pid]


# ----------------------------------------------------------------------------- capability


def propose_capability_partitions(users_offsets: Sequence[int], users: Sequence[int],
                                  is_getitem: Sequence[bool], supported: Sequence[bool],
                                  compute_weight: Sequence[int], allows_single_node_partition: bool,
                                  skip_horizontal_fusion: bool) -> PartitionsResult:
    """``CapabilityBasedPartitioner.propose_partitions`` on the flat encoding (see module doc)."""
    n = _check_nodes(users_offsets, users, is_getitem, supported, compute_weight)

    def users_of(i: int) -> Sequence[int]:
        return users[users_offsets[i]:users_offsets[i + 1]]

    assignment = [-1] * n
    # partition id -> {node: has_order}; dicts keep the reference's insertion order
    parts: Dict[int, Dict[int, bool]] = {}
    partition_map: Dict[int, Set[int]] = {}
    partitions_order: Dict[int, int] = {}
    partition_users: Dict[int, Set[int]] = {}
    seen = [0] * n
    stamp = [0]

    def reachable(starts) -> List[int]:
        """Nodes reachable from ``starts`` (inclusive), each once."""
        stamp[0] += 1
        s = stamp[0]
        stack = []
        for u in starts:
            if seen[u] != s:
                seen[u] = s
                stack.append(u)
        out = []
        while stack:
            x = stack.pop()
            out.append(x)
            for y in users_of(x):
                if seen[y] != s:
                    seen[y] = s
                    stack.append(y)
        return out

    def downstream_partitions(user_nodes, source_ids) -> Set[int]:
        found: Set[int] = set()
        expanded: Set[int] = set()  # a partition's map is added once
        for x in reachable(user_nodes):
            t = assignment[x]
            if t != -1 and t not in expanded:
                expanded.add(t)
                found.add(t)
                found.update(partition_map.get(t, ()))
        found.difference_update(source_ids)
        return found

    def finds_cycle(all_user_nodes, self_id: int, other_id: int) -> bool:
        stamp[0] += 1
        s = stamp[0]
        checked: Set[int] = set()
        stack = []
        for u in all_user_nodes:
            if seen[u] != s:
                seen[u] = s
                stack.append(u)
        while stack:
            x = stack.pop()
            t = assignment[x]
            if t == self_id or t == other_id:
                return True
            if t != -1 and t not in checked:
                pm = partition_map.get(t, ())
                if self_id in pm or other_id in pm:
                    return True
                checked.add(t)
            for y in users_of(x):
                if seen[y] != s:
                    seen[y] = s
                    stack.append(y)
        return False

    def maybe_merge(self_id: int, other_id: int) -> Tuple[int, bool]:
        self_nodes, other_nodes = parts[self_id], parts[other_id]
        all_user_nodes = partition_users[self_id] | partition_users[other_id]
        all_user_nodes = {u for u in all_user_nodes
                          if assignment[u] != self_id and assignment[u] != other_id}
        if finds_cycle(all_user_nodes, self_id, other_id):
            return self_id, False
        merge_id, removed_id = self_id, other_id
        if len(self_nodes) < len(other_nodes):
            merge_id, removed_id = removed_id, merge_id
        parts[merge_id].update(parts[removed_id])
        for m in parts[removed_id]:
            assignment[m] = merge_id
        del parts[removed_id]
        partitions_order[merge_id] = min(partitions_order[merge_id], partitions_order[removed_id])
        del partitions_order[removed_id]
        merged_map = partition_map.get(merge_id, set()) | partition_map.pop(removed_id, set())
        partition_users[merge_id] = all_user_nodes
        del partition_users[removed_id]
        merged_map.update(downstream_partitions(all_user_nodes, (merge_id, removed_id)))
        merged_map.discard(merge_id)
        merged_map.discard(removed_id)
        partition_map[merge_id] = merged_map
        return merge_id, True

    next_id = 0
    # A chain of merge attempts that merged nothing leaves the state as it was, so the
    # same chain at the next node (no new partition) would merge nothing either.
    dirty = False
    for i in reversed(range(n)):
        candidates: Dict[int, None] = {}
        created = False
        if supported[i] and assignment[i] == -1:
            pid = next_id
            next_id += 1
            partitions_order[pid] = pid
            assignment[i] = pid
            parts[pid] = {i: True}
            partition_users[pid] = set(users_of(i))
            partition_map.setdefault(pid, set()).update(downstream_partitions(users_of(i), (pid,)))
            candidates[pid] = None
            created = True
            dirty = True
        if skip_horizontal_fusion:
            if created:
                for u in users_of(i):
                    if assignment[u] != -1:
                        candidates[assignment[u]] = None
        elif dirty:
            for pid in sorted(partitions_order, key=partitions_order.__getitem__):
                candidates[pid] = None
        else:
            continue
        chain = list(candidates)
        merged_any = False
        if len(chain) > 1:
            self_id = chain[0]
            for other_id in chain[1:]:
                self_id, merged = maybe_merge(self_id, other_id)
                merged_any = merged_any or merged
        dirty = merged_any

    # nodes were added in reverse topological order with order = position from the end;
    # the reference sorts by descending order, i.e. back to graph order
    for pid in parts:
        parts[pid] = dict.fromkeys(sorted(parts[pid]), True)

    rounds = 0
    while True:
        reassignment: Dict[int, int] = {}
        for i in range(n):
            us = users_of(i)
            if all(is_getitem[u] for u in us):
                pid = assignment[i]
                for u in us:
                    if assignment[u] != pid:
                        reassignment[u] = pid
        if not reassignment:
            break
        rounds += 1
        if rounds > n + 1:
            raise ValueError(f"node {next(iter(reassignment))}: getitem reassignment does not "
                             "converge (a getitem node reads two tuple producers); the reference "
                             "loops forever on this graph")
        for u, pid in reassignment.items():
            if assignment[u] != -1:
                del parts[assignment[u]][u]
            assignment[u] = pid
            if pid != -1:
                parts[pid][u] = False

    out_parts = {pid: list(nodes) for pid, nodes in parts.items()}
    _filter_single_node(out_parts, compute_weight, allows_single_node_partition)
    ids, members, ordered = [], [], []
    for pid, nodes in out_parts.items():
        if nodes:
            ids.append(pid)
            members.append(nodes)
            ordered.append(sum(1 for m in nodes if parts[pid][m]))
    return ids, members, ordered


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
