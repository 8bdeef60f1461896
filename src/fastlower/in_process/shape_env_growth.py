"""What a retrace adds to a shape environment, recorded, and replayed by a skip.

A retrace of a program with data-dependent sizes makes, in its metadata pass and again in
its trace, a fresh unbacked symbol for each one the program binds, numbered from the
environment's counter, and gives it the copied symbol's range and size-likeness, a
replacement by it and a renaming to it (measured: ``benchmarks/retrace_probe``,
``RETRACE_PROBE_DELTA``). :func:`recorded_growth` keeps those entries when they are all a
retrace changed; :meth:`Growth.apply` adds them again to an environment whose counter has
moved on, each fresh symbol renumbered from it. Not written: the environment's records of
where a symbol was made (``var_to_stack``, ``var_to_range_sloc``) and its statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

__all__ = ["Growth", "recorded_growth"]

GROWN = ("var_to_range", "size_like", "replacements", "unbacked_renamings")


@dataclass
class Growth:
    """An earlier retrace's growth of the shape environment, as the fields it added."""

    start: int  # the unbacked counter before it
    count: int  # symbols it made
    added: Dict[str, Dict[Any, Any]]  # field -> {key: value}; size_like: {symbol: True}

    def renamed(self, to_start: int) -> Dict[Any, Any]:
        """The symbols it made -> those a repeat starting at ``to_start`` makes."""
        from torch.fx.experimental.symbolic_shapes import SymT, make_symbol

        return {make_symbol(SymT.UNBACKED_INT, self.start + i, integer=True):
                make_symbol(SymT.UNBACKED_INT, to_start + i, integer=True)
                for i in range(self.count)}

    def replayed(self, counter: int) -> Dict[str, Dict[Any, Any]]:
        """Per field, the entries a repeat adds to an environment whose unbacked counter
        is at ``counter``."""
        names = self.renamed(int(counter))

        def rename(value: Any) -> Any:
            return value.xreplace(names) if hasattr(value, "xreplace") else value

        return {field: {rename(key): rename(value) for key, value in entries.items()}
                for field, entries in self.added.items()}

    def apply(self, env: Any) -> None:
        """Adds the growth to ``env``, renumbered from its counter."""
        entries = self.replayed(env.unbacked_symint_counter)
        for field, items in entries.items():
            getattr(env, field).update(items)  # size_like, a set: the symbols
        env.unbacked_symint_counter += self.count
        if entries.get("replacements"):
            env._replacements_version_counter += 1  # as ShapeEnv._set_replacement does
        env._update_version_counter()

    def expected(self, before: Dict[str, Any]) -> Dict[str, Any]:
        """The state :meth:`apply` leaves an environment in ``before`` in (verify mode)."""
        expected = dict(before)
        for field, items in self.replayed(before["unbacked_symint_counter"]).items():
            expected[field] = (frozenset(before[field]) | frozenset(items)
                               if field == "size_like" else {**before[field], **items})
        expected["unbacked_symint_counter"] = before["unbacked_symint_counter"] + self.count
        return expected


def recorded_growth(before: Dict[str, Any], after: Dict[str, Any]) -> Optional["Growth"]:
    """What a retrace added to the shape environment, when only the fields that new
    unbacked symbols grow changed (None otherwise)."""
    changed = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
    if not changed <= {*GROWN, "unbacked_symint_counter"}:
        return None
    added: Dict[str, Dict[Any, Any]] = {}
    for field in GROWN:
        old, new = before.get(field), after.get(field)
        if isinstance(old, frozenset) and isinstance(new, frozenset) and old <= new:
            added[field] = {symbol: True for symbol in new if symbol not in old}
        elif isinstance(old, dict) and isinstance(new, dict) and old.items() <= new.items():
            added[field] = {key: value for key, value in new.items() if key not in old}
        elif old != new:
            return None
    start = int(before["unbacked_symint_counter"])
    growth = Growth(start, int(after["unbacked_symint_counter"]) - start, added)
    fresh = set(growth.renamed(start))
    if any(key not in fresh for entries in added.values() for key in entries):
        return None  # an entry for an older symbol: not a growth by fresh ones
    return growth
