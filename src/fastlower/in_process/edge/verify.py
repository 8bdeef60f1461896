"""Edge stages compared: a retrace's result and its skip's (verify mode), or two whole
stages' managers (the tests).

Compared: every method's program in the lowering cache's canonical form
(``fastlower.cache.compare``: graph, node names, targets, arguments, ``meta`` but
``from_node`` and ``seq_nr``, signature, ranges, module call graph, state and
constants by content), each node's ``from_node`` history (graph ids left out), the
debug handles ``to_executorch`` will derive from each node's oldest ancestor, the ops
kept from decomposition, and the compile config's exception list.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple


class EdgeStageVerificationError(AssertionError):
    """``FASTLOWER_EDGE_RETRACES=verify``: the edge stage with skipped retraces differs
    from ExecuTorch's."""

    def __init__(self, difference: str) -> None:
        super().__init__(f"the edge stage with skipped retraces differs from ExecuTorch's "
                         f"{difference}; set FASTLOWER_EDGE_RETRACES=all to run every "
                         "retrace, and please report it")
        self.difference = difference


def ancestors(program: Any) -> List[Tuple[str, Optional[int]]]:
    """Per node of every graph (breadth first), its name and the debug handle
    ExecuTorch's ``DebugHandleGeneratorPass`` would give it: nodes with the same oldest
    ancestor (``from_node``'s root: name and graph) share one, numbered in order of first
    appearance. Computed here without writing any node's ``meta``."""
    from executorch.exir.debug_handle_utils import get_greatest_ancestor_node_identifier
    from executorch.exir.graph_module import bfs_trace_with_node_process

    found: List[Tuple[str, Optional[int]]] = []
    handles: Dict[str, int] = {}

    def record(node: Any) -> None:
        if node.op in ("placeholder", "output") or "from_node" not in node.meta:
            found.append((node.name, None))
            return
        identifier = get_greatest_ancestor_node_identifier(node)
        found.append((node.name, handles.setdefault(identifier, len(handles) + 1)))

    bfs_trace_with_node_process(program.graph_module, record)
    return found


def _history(sources: Any) -> Tuple[Any, ...]:
    """``from_node`` in comparable form: per link its pass, actions, node name and target,
    and its own history (graph ids are ids of freed graphs: left out, as the
    differential suite does)."""
    return tuple((source.pass_name, tuple(a.name for a in source.action), source.name,
                  source.target, _history(source.from_node)) for source in sources or ())


def histories(program: Any) -> List[Tuple[str, Tuple[Any, ...]]]:
    """Per node of every graph (breadth first), its name and ``from_node`` history."""
    from executorch.exir.graph_module import bfs_trace_with_node_process

    found: List[Tuple[str, Tuple[Any, ...]]] = []
    bfs_trace_with_node_process(program.graph_module, lambda node: found.append(
        (node.name, _history(node.meta.get("from_node")))))
    return found


def _history_difference(expected: Any, got: Any) -> Optional[str]:
    for (name, a), (_, b) in zip(histories(expected), histories(got)):
        if a != b:
            return f"in node {name}'s from_node history: {str(a)[:200]} vs {str(b)[:200]}"
    return None


def program_difference(expected: Any, got: Any) -> Optional[str]:
    """None when two programs agree (canonical form and debug handles), else where."""
    from ...cache import compare

    difference = compare.first_difference(compare.describe({"forward": expected}),
                                          compare.describe({"forward": got}),
                                          "retraced", "skipped")
    if difference is None and ancestors(expected) != ancestors(got):
        difference = "in the debug handles (the nodes' oldest ancestors)"
    return difference or _history_difference(expected, got)


def first_difference(expected: Any, got: Any) -> Optional[str]:
    """None when the two ``EdgeProgramManager`` s agree, else where they first differ."""
    from ...cache import compare

    difference = compare.first_difference(
        compare.describe(expected._edge_programs, expected._config_methods),
        compare.describe(got._edge_programs, got._config_methods), "reference", "fastlower")
    if difference is not None:
        return difference
    for name, program in expected._edge_programs.items():
        if ancestors(program) != ancestors(got._edge_programs[name]):
            return f"in method {name}: the debug handles (the nodes' oldest ancestors)"
        history = _history_difference(program, got._edge_programs[name])
        if history is not None:
            return f"in method {name}: {history}"
    for what in ("_core_aten_ops_exception_list", "preserve_ops"):
        a = getattr(expected.compile_config, what, None)
        b = getattr(got.compile_config, what, None)
        if (a is None) != (b is None) or (a is not None and b is not None and set(a) != set(b)):
            return f"in the compile config's {what}"
    return None
