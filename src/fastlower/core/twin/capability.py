"""torch.fx ``CapabilityBasedPartitioner.propose_partitions`` (torch 2.13), exactly, on the
flat encoding described in :mod:`.partition_proposals` (twin of csrc/partition_capability.cpp).

The reference walks nodes in reverse topological order; a supported node starts a
partition, then a *chain* of merge attempts runs: the running partition tries to absorb
every other one (in partition order).  An attempt searches the node-level downstream
closure of the pair's users for a node of either partition, or of a partition whose
reachability map (``partition_map``) holds either; a merge then walks that closure again
for the merged partition's map.  The same chains run here, with the same answers, and
less work:

* the search is breadth first, over the users lists (no per-node closure sets): a
  failing attempt (most are) usually stops within a node or two of its start, where the
  reference's order can wander through the whole closure first;
* a search that finds nothing has seen the whole closure, none of it in either
  partition, so the partitions it reached are the merged partition's downstream set:
  the second walk is not made;
* a chain that merges nothing leaves the state as it was, so the next node's chain (no
  new partition) would merge nothing either and is skipped;
* maps keep live partition ids only: an id absorbed by a merge never comes back, and
  the reference only asks a map whether it holds a live id.

What remains is one walk of a closure per new partition and per merge.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

from .partition_checks import _check_nodes

PartitionsResult = Tuple[List[int], List[List[int]], List[int]]


class _State:
    """Partitions of the reference's main loop, by id."""

    def __init__(self, n: int, users_of) -> None:
        self.users_of = users_of
        self.assignment = [-1] * n
        self.parts: Dict[int, Dict[int, bool]] = {}      # id -> {node: has_order}
        self.partition_map: Dict[int, Set[int]] = {}     # id -> live downstream ids
        self.order: Dict[int, int] = {}                  # id -> min original id
        self.partition_users: Dict[int, Set[int]] = {}
        self.seen = [0] * n
        self.stamp = 0

    def search(self, starts, a: int, b: int) -> Optional[List[int]]:
        """None at the first node (breadth first from ``starts``, inclusive) of partition
        ``a`` or ``b`` or of a partition whose map holds one of them; else every partition
        with a node in that closure, each once."""
        self.stamp += 1
        s, seen, assignment, maps = self.stamp, self.seen, self.assignment, self.partition_map
        queue = []
        for u in starts:
            if seen[u] != s:
                seen[u] = s
                queue.append(u)
        reached: Dict[int, None] = {}
        for x in queue:  # grows while iterated: a queue
            t = assignment[x]
            if t != -1:
                if t == a or t == b:
                    return None
                if t not in reached:
                    if a in maps[t] or b in maps[t]:
                        return None
                    reached[t] = None
            for y in self.users_of(x):
                if seen[y] != s:
                    seen[y] = s
                    queue.append(y)
        return list(reached)

    def downstream(self, reached: List[int], sources: Tuple[int, ...]) -> Set[int]:
        """The reference's ``downstream_partitions`` of a closure that reached ``reached``."""
        found: Set[int] = set()
        for t in reached:
            found.add(t)
            found.update(q for q in self.partition_map[t] if q in self.parts)
        found.difference_update(sources)
        return found

    def create(self, i: int, pid: int) -> None:
        self.order[pid] = pid
        self.assignment[i] = pid
        self.parts[pid] = {i: True}
        self.partition_users[pid] = set(self.users_of(i))
        reached = self.search(self.users_of(i), -1, -1)  # no partition is -1
        self.partition_map[pid] = self.downstream(reached or [], (pid,))

    def maybe_merge(self, self_id: int, other_id: int) -> Tuple[int, bool]:
        all_user_nodes = [u for u in dict.fromkeys(self.partition_users[self_id]
                                                   | self.partition_users[other_id])
                          if self.assignment[u] not in (self_id, other_id)]
        reached = self.search(all_user_nodes, self_id, other_id)
        if reached is None:  # a cycle
            return self_id, False
        merge_id, removed_id = self_id, other_id
        if len(self.parts[self_id]) < len(self.parts[other_id]):
            merge_id, removed_id = removed_id, merge_id
        removed = self.parts.pop(removed_id)
        self.parts[merge_id].update(removed)
        for m in removed:
            self.assignment[m] = merge_id
        self.order[merge_id] = min(self.order[merge_id], self.order.pop(removed_id))
        del self.partition_users[removed_id]
        merged_map = self.partition_map[merge_id] | self.partition_map.pop(removed_id)
        self.partition_users[merge_id] = set(all_user_nodes)
        merged_map.update(self.downstream(reached, (merge_id, removed_id)))
        merged_map.discard(merge_id)
        merged_map.discard(removed_id)
        self.partition_map[merge_id] = merged_map
        return merge_id, True


def _main_loop(state: _State, n: int, supported: Sequence[bool],
               skip_horizontal_fusion: bool) -> None:
    next_id = 0
    dirty = False  # see the module doc: a chain that merged nothing is not repeated
    for i in reversed(range(n)):
        candidates: Dict[int, None] = {}
        created = False
        if supported[i] and state.assignment[i] == -1:
            state.create(i, next_id)
            candidates[next_id] = None
            next_id += 1
            created = dirty = True
        if skip_horizontal_fusion:
            if created:
                for u in state.users_of(i):
                    if state.assignment[u] != -1:
                        candidates[state.assignment[u]] = None
        elif dirty:
            for pid in sorted(state.order, key=state.order.__getitem__):
                candidates[pid] = None
        else:
            continue
        chain = list(candidates)
        merged_any = False
        if len(chain) > 1:
            self_id = chain[0]
            for other_id in chain[1:]:
                self_id, merged = state.maybe_merge(self_id, other_id)
                merged_any = merged_any or merged
        dirty = merged_any


def _reassign_getitems(state: _State, n: int, is_getitem: Sequence[bool]) -> None:
    """The reference's getitem pass, repeated until nothing moves."""
    assignment, parts = state.assignment, state.parts
    rounds = 0
    while True:
        reassignment: Dict[int, int] = {}
        for i in range(n):
            us = state.users_of(i)
            if all(is_getitem[u] for u in us):
                pid = assignment[i]
                for u in us:
                    if assignment[u] != pid:
                        reassignment[u] = pid
        if not reassignment:
            return
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


def propose_capability_partitions(users_offsets: Sequence[int], users: Sequence[int],
                                  is_getitem: Sequence[bool], supported: Sequence[bool],
                                  compute_weight: Sequence[int], allows_single_node_partition: bool,
                                  skip_horizontal_fusion: bool) -> PartitionsResult:
    """``CapabilityBasedPartitioner.propose_partitions`` on the flat encoding."""
    n = _check_nodes(users_offsets, users, is_getitem, supported, compute_weight)
    state = _State(n, lambda i: users[users_offsets[i]:users_offsets[i + 1]])
    _main_loop(state, n, supported, skip_horizontal_fusion)
    # nodes were added in reverse topological order with order = position from the end;
    # the reference sorts by descending order, i.e. back to graph order
    for pid in state.parts:
        state.parts[pid] = dict.fromkeys(sorted(state.parts[pid]), True)
    _reassign_getitems(state, n, is_getitem)
    ids, members, ordered = [], [], []
    for pid, nodes in state.parts.items():
        weight = sum(compute_weight[m] for m in nodes)
        if nodes and (allows_single_node_partition or weight > 1):
            ids.append(pid)
            members.append(list(nodes))
            ordered.append(sum(1 for has_order in nodes.values() if has_order))
    return ids, members, ordered
