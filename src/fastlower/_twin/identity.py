"""Structural graph identity, the linear form of the reference's recursive check."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple


def first_difference(op_a: Sequence[int], target_a: Sequence[int], off_a: Sequence[int],
                     in_a: Sequence[int], op_b: Sequence[int], target_b: Sequence[int],
                     off_b: Sequence[int], in_b: Sequence[int]) -> int:
    """Index of the first node whose structure differs, -1 when the graphs are identical.

    Two nodes are the same when op and target match and their inputs are,
    recursively, the same: each node gets a structural class by hash-consing
    (op, target, classes of its inputs) in graph order, with one table shared by
    both graphs.  Returns ``len`` of the shorter graph when only the node counts differ.
    """
    table: Dict[Tuple, int] = {}

    def classes(op, target, off, flat) -> List[int]:
        out: List[int] = []
        for i in range(len(op)):
            ins = tuple(out[j] if j < i else -1 - j for j in flat[off[i]:off[i + 1]])
            key = (op[i], target[i], ins)
            out.append(table.setdefault(key, len(table)))
        return out

    ca = classes(op_a, target_a, off_a, in_a)
    cb = classes(op_b, target_b, off_b, in_b)
    for i, (x, y) in enumerate(zip(ca, cb)):
        if x != y:
            return i
    return -1 if len(ca) == len(cb) else min(len(ca), len(cb))
