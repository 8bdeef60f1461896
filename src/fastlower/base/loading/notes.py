"""Which types of a program's trees are stand-ins, in words for a report."""

from __future__ import annotations

from typing import Any, List

from . import standins


def replaced_types(program: Any) -> List[type]:
    """The stand-in types in ``program``'s input and output trees (an ``ExportedProgram``
    or the dict of them ``to_backend`` returns), in order of first use."""
    programs = program.values() if isinstance(program, dict) else [program]
    found: List[type] = []
    for each in programs:
        try:
            spec = each.call_spec
        except Exception:  # not an ExportedProgram, or one without a root call signature
            continue
        for cls in standins.replaced_in(spec.in_spec) + standins.replaced_in(spec.out_spec):
            if cls not in found:
                found.append(cls)
    return found


def describe_replacements(program: Any) -> List[str]:
    """One line per stand-in type in ``program``'s trees (for a lowering's report)."""
    return [f"{cls.type_name} was replaced by a generic container when the program was loaded "  # type: ignore[attr-defined]
            f"({cls.reason}); the .pte returns the flattened leaves in the same order"  # type: ignore[attr-defined]
            for cls in replaced_types(program)]


