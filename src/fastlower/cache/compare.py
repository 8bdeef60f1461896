"""Two lowerings compared line by line in canonical form; the first difference, named.

Used by verify mode (a hit against a fresh lowering) and before every store (the
fresh result against its own serialized copy read back: a lowering whose copy
would differ is not stored). The form is :class:`.key.ProgramCanonical`'s with
every line recorded: per method, per node its op, name, target, arguments, users
and ``meta`` (but ``from_node`` and ``seq_nr``), each delegate's backend id,
compile specs, processed bytes, ``meta`` (debug-handle map), named data and
program, then the signature, ranges, module call graph, state and constants by
content, verifiers and example inputs.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Tuple

from torch.export import ExportedProgram

from .key import ProgramCanonical

Lines = List[Tuple[str, str]]
_SHOW = 240


def describe(programs: Mapping[str, ExportedProgram], config_methods: Any = None) -> Lines:
    """The canonical lines of a lowering's programs (and its ``constant_methods``)."""
    canonical = ProgramCanonical(record=True)
    canonical.write(f"methods:{list(programs)}")
    for name, program in programs.items():
        canonical.where = f"method {name}"
        canonical.program(program)
    canonical.where = "constant_methods"
    canonical.write(canonical.objects.text(config_methods, "constant_methods"))
    return canonical.lines or []


def first_difference(expected: Lines, got: Lines, expected_name: str = "fresh",
                     got_name: str = "cached") -> Optional[str]:
    """None when equal, else where they first differ and both sides, shortened."""
    for (where_a, a), (where_b, b) in zip(expected, got):
        if a != b:
            where = where_a if where_a == where_b else f"{where_a} / {where_b}"
            return f"at {where}: {expected_name} {_short(a)} vs {got_name} {_short(b)}"
    if len(expected) != len(got):
        longer, name = (expected, expected_name) if len(expected) > len(got) else (got, got_name)
        where, text = longer[min(len(expected), len(got))]
        return f"at {where}: only the {name} lowering has {_short(text)}"
    return None


def _short(text: str) -> str:
    return repr(text if len(text) <= _SHOW else text[:_SHOW] + "...")
