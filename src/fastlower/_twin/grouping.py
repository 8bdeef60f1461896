"""Group node indices by delegation tag."""

from __future__ import annotations

from typing import List, Sequence


def group_by_tag(tags: Sequence[int], n_tags: int) -> List[List[int]]:
    """Node indices of each tag ``0..n_tags-1``, in node order; other values are ignored."""
    groups: List[List[int]] = [[] for _ in range(n_tags)]
    for i, t in enumerate(tags):
        if 0 <= t < n_tags:
            groups[t].append(i)
    return groups
