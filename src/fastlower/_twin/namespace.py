"""Pure-Python twin of the FX node-name allocator (``torch.fx.graph._Namespace``).

The reference lowering creates nodes (getitems, delegate calls, ...) between
full re-sorts of the graph; every re-sort rebuilds the namespace in the new node
order, which changes the numbering of the next created names.  The planner
replays that sequence on names alone.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Set, Tuple

_NAME_RE = re.compile(r"^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$")
_ILLEGAL_CHARS_RE = re.compile("[^0-9a-zA-Z_]+")
_SNAKE_RE = re.compile(r"(?<=[a-z])([A-Z])")


def _illegal_names() -> Set[str]:
    # Same set torch.fx refuses as node names (Python keywords and builtins).
    from torch.fx import graph as fx_graph

    return set(fx_graph._illegal_names)


ILLEGAL_NAMES: Set[str] = _illegal_names()


def snake_case(s: str) -> str:
    """``torch.fx.graph._snake_case``: how FX turns a call target into a name."""
    return _SNAKE_RE.sub(r"_\1", s).lower()


def split_name(candidate: str) -> Tuple[str, str, int | None]:
    """Sanitise ``candidate`` and split it into (candidate, base, numeric suffix)."""
    match = _NAME_RE.match(candidate)
    if match is None:
        candidate = _ILLEGAL_CHARS_RE.sub("_", candidate) or "_unnamed"
        if candidate[0].isdigit():
            candidate = f"_{candidate}"
        match = _NAME_RE.match(candidate)
    base, num = match.group(1, 2)
    return candidate, base, (int(num) if num is not None else None)


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
