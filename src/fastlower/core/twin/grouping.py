"""Group node indices by delegation tag."""

from __future__ import annotations

from typing import List, Sequence

from .checks import MAX_TAGS, check_tag_ids


def group_by_tag(tags: Sequence[int], n_tags: int) -> List[List[int]]:
    """Node indices of each tag ``0..n_tags-1``, in node order; -1 and -2 are ignored.

    ``n_tags`` must be in ``[0, MAX_TAGS]`` (ValueError) and every tag -2 (unknown),
    -1 (untagged) or a tag id below ``n_tags`` (IndexError).
    """
    if not 0 <= n_tags <= MAX_TAGS:
        raise ValueError(f"group_by_tag: n_tags is not in [0, {MAX_TAGS}]")
    check_tag_ids("group_by_tag", "tags", tags, n_tags)
    groups: List[List[int]] = [[] for _ in range(n_tags)]
    for i, t in enumerate(tags):
        if 0 <= t < n_tags:
            groups[t].append(i)
    return groups
