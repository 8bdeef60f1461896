"""Input checks of the partitioners' twins (``partition.py``).

The C++ core (``csrc/partition_graph.cpp``) runs the same checks with the same messages:
malformed input is a ValueError, a node index out of range an IndexError.
"""

from __future__ import annotations

from typing import List, Sequence

__all__ = ["_check_csr", "_check_nodes", "_check_inputs", "_group_of_nodes"]


def _check_csr(name: str, offsets: Sequence[int], values: Sequence[int], n_rows: int,
               n: int) -> None:
    if len(offsets) != n_rows + 1:
        raise ValueError(f"{name}: expected {n_rows + 1} offsets, got {len(offsets)}")
    if offsets[0] != 0 or offsets[-1] != len(values):
        raise ValueError(f"{name}: offsets must start at 0 and end at {len(values)}")
    for r in range(n_rows):
        if offsets[r] > offsets[r + 1]:
            raise ValueError(f"{name}: offsets decrease at row {r}")
    for k, v in enumerate(values):
        if not 0 <= v < n:
            raise IndexError(f"{name}: entry {k} refers to node {v}, outside 0..{n - 1}")


def _check_nodes(users_offsets: Sequence[int], users: Sequence[int], is_getitem: Sequence[bool],
                 supported: Sequence[bool], compute_weight: Sequence[int]) -> int:
    n = len(supported)
    if len(is_getitem) != n or len(compute_weight) != n:
        raise ValueError(f"per-node arrays differ in length: supported {n}, is_getitem "
                         f"{len(is_getitem)}, compute_weight {len(compute_weight)}")
    _check_csr("users", users_offsets, users, n, n)
    for i in range(n):
        for k in range(users_offsets[i], users_offsets[i + 1]):
            if users[k] <= i:
                raise ValueError(f"users: node {i} has user {users[k]} that does not come after it "
                                 "(the graph is not in topological order)")
    for i, w in enumerate(compute_weight):
        if not 0 <= w <= 2:
            raise ValueError(f"compute_weight: node {i} has weight {w}, expected 0..2")
    return n


def _check_inputs(inputs_offsets: Sequence[int], inputs: Sequence[int], n: int) -> None:
    _check_csr("inputs", inputs_offsets, inputs, n, n)
    for i in range(n):
        for k in range(inputs_offsets[i], inputs_offsets[i + 1]):
            if inputs[k] >= i:
                raise ValueError(f"inputs: node {i} has input {inputs[k]} that does not come "
                                 "before it (the graph is not in topological order)")


def _group_of_nodes(group_offsets: Sequence[int], group_members: Sequence[int],
                    n: int) -> List[int]:
    n_groups = len(group_offsets) - 1
    if n_groups < 0:
        raise ValueError("groups: expected at least one offset")
    _check_csr("groups", group_offsets, group_members, n_groups, n)
    group_of = [-1] * n
    for g in range(n_groups):
        for k in range(group_offsets[g], group_offsets[g + 1]):
            m = group_members[k]
            if group_of[m] != -1:
                raise ValueError(f"node {m} exists in multiple groups ({group_of[m]} and {g})")
            group_of[m] = g
    return group_of
