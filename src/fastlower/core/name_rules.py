"""torch.fx's node-name rules, shared by the C++ core and its Python twin.

``torch.fx.graph._Namespace.create_name`` sanitises a candidate with two regexes,
splits off a numeric suffix and refuses the names in ``torch.fx.graph._illegal_names``.
That set is built at run time (Python's keywords, the ``builtins`` module's names when
torch.fx was imported, torch's custom builtins), so the core cannot know it by itself:
:func:`fastlower.core.loader.load_core` hands :data:`ILLEGAL_NAMES` to it once
(``_core.set_name_rules``), and the twin (``fastlower.core.twin.namespace``) reads it here.

Unicode: the character classes are ASCII, but ``\\d`` is any Unicode decimal digit
(``str.isdecimal``); the core asks Python's own Unicode database for those.
"""

from __future__ import annotations

import re
from typing import FrozenSet, Tuple

__all__ = ["ILLEGAL_NAMES", "snake_case", "split_name"]

_NAME_RE = re.compile(r"^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$")
_ILLEGAL_CHARS_RE = re.compile("[^0-9a-zA-Z_]+")
_SNAKE_RE = re.compile(r"(?<=[a-z])([A-Z])")


def _illegal_names() -> FrozenSet[str]:
    # Same set torch.fx refuses as node names (Python keywords and builtins).
    from torch.fx import graph as fx_graph

    return frozenset(fx_graph._illegal_names)


ILLEGAL_NAMES: FrozenSet[str] = _illegal_names()


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
        if match is None:  # a sanitised candidate is an identifier, which always matches
            raise ValueError(f"no node name can be made of {candidate!r}")
    base, num = match.group(1, 2)
    return candidate, base, (int(num) if num is not None else None)
