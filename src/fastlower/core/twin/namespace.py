"""Pure-Python twin of the FX node-name allocator (``torch.fx.graph._Namespace``).

The reference lowering creates nodes (getitems, delegate calls, ...) between
full re-sorts of the graph; every re-sort rebuilds the namespace in the new node
order, which changes the numbering of the next created names.  The planner
replays that sequence on names alone.  The name rules themselves (illegal names,
sanitising, suffix split) are shared with the C++ core: ``fastlower.core.name_rules``.
"""

from __future__ import annotations

from typing import Dict, Iterable, Set

from ..name_rules import ILLEGAL_NAMES, snake_case, split_name

__all__ = ["ILLEGAL_NAMES", "Namespace", "snake_case", "split_name"]


class Namespace:
    """Name allocation identical to ``_Namespace.create_name(candidate, None)``."""

    def __init__(self, names_in_order: Iterable[str] = ()) -> None:
        self.used: Set[str] = set()
        self.base_count: Dict[str, int] = {}
        for name in names_in_order:
            self.create(name)

    def create(self, candidate: str) -> str:
        candidate, base, num = split_name(candidate)
        if num is None or candidate in self.used:
            num = self.base_count.get(base, 0)
            if candidate in ILLEGAL_NAMES:
                num += 1
                candidate = f"{base}_{num}"
        while candidate in self.used:
            num += 1
            candidate = f"{base}_{num}"
        self.used.add(candidate)
        self.base_count[base] = num
        return candidate
