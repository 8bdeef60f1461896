"""A retrace that repeats an earlier retrace of the same edge stage, skipped.

:mod:`.noop_retrace` proves a retrace changes nothing from the program alone, which it
cannot do for a program with symbolic sizes (a retrace renames nodes there, by a rule
not modelled). This module proves it from an earlier retrace of the same stage instead.

The premise: ``run_decompositions(table)`` gives a result determined by its input's
operators, arguments, ``meta`` (but ``from_node`` and ``seq_nr``), signature, ranges and
state, by what the table does to those operators, and by the shape environment's
entries for the program's own symbols. It does not read node names (it names each node
it makes after its operator, from its own counter; an old name reaches only
``from_node``, :mod:`.retrace_history`), nor the order of a node's users (it reads a
deep copy of the graph), nor what it writes or drops unread: an operator node's
``original_aten`` and ``eager_input_vals``, a key outside those the tracer copies, and a
parameter's fields taken from its readers (:mod:`.retrace_meta`).

So when an earlier retrace of this stage took ``X`` to ``Y`` with ``X`` equal to ``Y`` up to
all of those ("a fixed point up to names"), a retrace of ``Z`` with a table that does
what the earlier one's did gives ``f(Z) = f(X) = Y`` when ``Z`` equals ``Y`` up to the same
but with names and users' order: its input back, with what the retrace writes unread
written. Checked here (:class:`RetraceMemory`):

* ``X``'s and ``Y``'s canonical lines (``fastlower.cache.compare``'s, nodes by position,
  :func:`_lines`) are equal, and ``Z``'s are ``Y``'s with the same names, users and
  signature (:func:`_names`);
* the two tables are equal (the same operators, the same decomposition objects, or
  ``functools.partial`` s of one closure-free function with equal arguments);
* since the earlier retrace, the shape environment grew only by unbacked symbols the
  program does not use, every older entry unchanged
  (``shape_env_state.grown_by_other_unbacked``).

A skip then writes (:meth:`Repeat.write`) the parameters' fields from their readers and
the ``from_node`` links, each operator node's keys as ``Y``'s node has them, and replays
the earlier retrace's growth of the shape environment (``shape_env_growth``), renumbered
from the counter; an earlier retrace that grew it otherwise is not remembered.

Measured on ``export_llm``'s program with XNNPACK's two partitioners: the second
partitioner's default-table retrace repeats the first partitioner's.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.export import ExportedProgram

from ..shape_env_growth import Growth, recorded_growth
from ..shape_env_state import grown_by_other_unbacked, shape_env_state
from .noop_retrace import SELF_RETRACING, TRACED_KEYS, aten_op, graph_modules, producer
from .retrace_history import add_retrace_links
from .retrace_meta import copied_fields, eager_input_vals, lifted_names, parameters_as_retraced

log = logging.getLogger("fastlower.in_process.edge")
# the meta keys a retrace gives an operator node (it copies the first group from the
# node it retraces and rebinds data-dependent sizes from val and unbacked_bindings); any
# other key it drops unread
_TRACED = frozenset(TRACED_KEYS | {"unbacked_bindings"})


def shape_env_of(program: ExportedProgram) -> Any:
    """The shape environment of the program's fake values (None: static, or none)."""
    for node in program.graph_module.graph.nodes:
        env = getattr(getattr(node.meta.get("val"), "fake_mode", None), "shape_env", None)
        if env is not None:
            return env
    return None


def _lines(program: ExportedProgram, digests: Dict[int, Any]) -> List[str]:
    """The program's canonical lines (``fastlower.cache.compare``'s) with its nodes
    labelled by position and without what a retrace writes or drops unread
    (:func:`_writer`); :func:`_names` holds what they leave out."""
    canonical = _writer()(digests, record=True)
    canonical.program(program)
    return [text for _, text in canonical.lines or []]


@functools.lru_cache(maxsize=None)
def _writer() -> type:
    from ...cache.key import ProgramCanonical  # the cache imports this package

    class Writer(ProgramCanonical):
        """Nodes but placeholders labelled by position, no node's order of users (a
        retrace reads a deep copy of the graph, which lists users in graph order), and
        left out what a retrace writes or drops without reading it, which a skip writes
        or drops the same way (:meth:`Repeat.write`): a lifted placeholder's fields from
        its readers, an operator node's keys outside :data:`_TRACED`, its
        ``eager_input_vals`` and ``original_aten`` (the operator it dispatches or, for a
        ``getitem``, unpacks)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.labels: Dict[Any, str] = {}
            self.lifted: set = set()
            self.from_readers = frozenset(copied_fields())

        def program(self, program: ExportedProgram) -> None:
            self.lifted = lifted_names(program)
            super().program(program)

        def graph(self, gm: torch.fx.GraphModule) -> None:
            for node in gm.graph.nodes:
                self.labels[node] = (node.name if node.op == "placeholder"
                                     else f"#{len(self.labels)}")
            super().graph(gm)

        def node_label(self, node: torch.fx.Node) -> str:
            return self.labels.get(node, node.name)

        def node_extra(self, node: torch.fx.Node) -> None:
            pass  # users' order: in _names

        def skipped_meta(self, node: torch.fx.Node) -> frozenset:
            skipped = super().skipped_meta(node)
            if node.op == "placeholder" and node.name in self.lifted:
                return skipped | self.from_readers
            if node.op != "call_function":
                return skipped
            skipped = skipped | {"eager_input_vals"} | (node.meta.keys() - _TRACED)
            if isinstance(producer(node).target, torch._ops.OpOverload):
                return skipped | {"original_aten"}
            return skipped

        def signature_text(self, program: ExportedProgram) -> str:
            by_name = {node.name: label for node, label in self.labels.items()}
            signature = program.graph_signature
            return repr([(spec.kind.name, type(spec.arg).__name__,
                          by_name.get(getattr(spec.arg, "name", None), None),
                          spec.target, getattr(spec, "persistent", None))
                         for spec in (*signature.input_specs, *signature.output_specs)])

    return Writer


def _same_decomposition(a: Any, b: Any) -> bool:
    """The same function, or two ``functools.partial`` s of one closure-free function's
    code with equal arguments (torch's table makes a new one per CompositeImplicitAutograd
    operator each time it is built)."""
    if a is b:
        return True
    if not (isinstance(a, functools.partial) and isinstance(b, functools.partial)):
        return False
    code_a, code_b = getattr(a.func, "__code__", None), getattr(b.func, "__code__", None)
    return (code_a is not None and code_a is code_b and not a.func.__closure__
            and not b.func.__closure__ and a.func.__globals__ is b.func.__globals__
            and a.args == b.args and a.keywords == b.keywords)


def _same_table(a: Dict[Any, Any], b: Dict[Any, Any]) -> bool:
    return a.keys() == b.keys() and all(_same_decomposition(a[op], b[op]) for op in a)


def _ops(program: ExportedProgram) -> Tuple[Tuple[str, str], ...]:
    return tuple((node.op, str(node.target)) for node in program.graph_module.graph.nodes)


_ABSENT = object()


def _layout(program: ExportedProgram) -> List[Tuple[Tuple[str, ...], Any]]:
    """Per node of the root graph: its meta keys in order, and its ``original_aten``."""
    return [(tuple(node.meta), node.meta.get("original_aten", _ABSENT))
            for node in program.graph_module.graph.nodes]


@dataclass
class _Record:
    """A retrace of this stage that returned its input up to names."""

    lines: List[str]  # the result's canonical lines, nodes by position (:func:`_lines`)
    names: Tuple[Any, ...]  # and what those leave out (:func:`_names`)
    layout: List[Tuple[Tuple[str, ...], Any]]  # the result's meta keys (:func:`_layout`)
    table: Dict[Any, Any]
    state_after: Optional[Dict[str, Any]]  # the shape environment after it (None: static)
    growth: Optional[Growth]


@dataclass
class Repeat:
    """A retrace found to repeat an earlier one: what skipping it must still do."""

    record: _Record
    env: Any

    def write(self, program: ExportedProgram) -> None:
        """The meta the retrace would have written: the parameters' fields from their
        readers and every node's ``from_node`` links (:mod:`.retrace_meta`); each
        operator node's keys as the earlier result's (a key it lacks dropped, its
        ``original_aten`` and ``eager_input_vals`` written as it has them)."""
        root = program.graph_module
        parameters_as_retraced(root, lifted_names(program))  # first: reads the readers' meta
        add_retrace_links(root)
        for node, (keys, original) in zip(root.graph.nodes, self.record.layout):
            if node.op != "call_function":
                continue
            meta = node.meta
            if "original_aten" in keys:
                meta["original_aten"] = original
            if "eager_input_vals" in keys:
                meta["eager_input_vals"] = eager_input_vals(node)
            ordered = {key: meta[key] for key in keys if key in meta}
            meta.clear()
            meta.update(ordered)

    def replay(self) -> None:
        """The shape environment's growth the retrace would have made."""
        if self.env is not None and self.record.growth is not None:
            self.record.growth.apply(self.env)

    def expected_state(self, before: Dict[str, Any]) -> Dict[str, Any]:
        """The environment's state after a replay from ``before`` (verify mode)."""
        growth = self.record.growth
        return dict(before) if growth is None else growth.expected(before)


class RetraceMemory:
    """The retraces an edge stage ran, for finding a later one that repeats them."""

    def __init__(self) -> None:
        self.records: List[_Record] = []
        self.digests: Dict[int, Any] = {}  # tensor digests, shared by every description

    def repeat_of(self, program: ExportedProgram, table: Dict[Any, Any]) -> Optional[Repeat]:
        """How to skip ``program.run_decompositions(table)``, or None (it must run)."""
        candidates = [r for r in self.records if _same_table(r.table, table)]
        if not candidates:
            log.debug("no earlier retrace with this table returned its input")
            return None
        env = shape_env_of(program)
        state = shape_env_state(env) if env is not None else None
        lines = None
        for record in reversed(candidates):
            if not _same_environment(record, state, program):
                log.debug("the shape environment changed since an earlier retrace")
                continue
            if lines is None:
                lines = _lines(program, self.digests)
            if lines == record.lines and _names(program) == record.names:
                return Repeat(record, env)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("not an earlier retrace's result: %s",
                          _first_change(record.lines, lines))
        return None

    def run(self, program: ExportedProgram, table: Dict[Any, Any]) -> ExportedProgram:
        """``program.run_decompositions(table)``, remembered when it returned its input up
        to names (its input is described first: a retrace may touch it)."""
        env = shape_env_of(program)
        state = shape_env_state(env) if env is not None else None
        ops = _ops(program)
        positional_input = (_lines(program, self.digests)
                            if table and not _decomposes(program, table) else None)
        result = program.run_decompositions(table)
        if positional_input is None or ops != _ops(result):
            log.debug("a retrace changed the operators")
            return result
        positional_result = _lines(result, self.digests)
        if positional_input != positional_result:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("a retrace kept the operators but changed %s",
                          _first_change(positional_input, positional_result))
            return result
        if _has_subgraphs(result):
            return result  # the layout covers the root graph only
        if any(node.meta.keys() - _TRACED for node in result.graph_module.graph.nodes
               if node.op == "call_function"):
            log.debug("a retrace gave a node a key outside those it is known to give")
            return result  # the premise does not cover that key: compared nowhere
        after = shape_env_state(env) if env is not None else None
        growth = recorded_growth(state, after) if state is not None and after is not None else None
        if env is not None and growth is None:
            log.debug("a retrace grew the shape environment beyond new unbacked symbols")
            return result
        self.records.append(_Record(positional_result, _names(result), _layout(result),
                                    dict(table), after, growth))
        log.debug("a retrace returned its input up to names: remembered")
        return result


def _names(program: ExportedProgram) -> Tuple[Any, ...]:
    """What a program's positional lines leave out of its full ones: its nodes' names, each
    node's users in order, the signature (equal positional lines and equal names: equal
    full lines)."""
    nodes = program.graph_module.graph.nodes
    return (tuple(node.name for node in nodes),
            tuple(tuple(user.name for user in node.users) for node in nodes),
            str(program.graph_signature))


def _decomposes(program: ExportedProgram, table: Dict[Any, Any]) -> bool:
    """Whether an operator of the program is in the table: the retrace decomposes it, so
    it will not return its input (not worth describing the input for)."""
    return any(aten_op(node.target) in table and aten_op(node.target) not in SELF_RETRACING
               for node in program.graph_module.graph.nodes if node.op == "call_function")


def _same_environment(record: _Record, state: Optional[Dict[str, Any]],
                      program: ExportedProgram) -> bool:
    """Whether the shape environment is the record's but for unbacked symbols the program
    does not use (both static: trivially)."""
    if record.state_after is None or state is None:
        return record.state_after is None and state is None
    return record.growth is not None and grown_by_other_unbacked(
        record.state_after, state, _used_symbols(program))


def _has_subgraphs(program: ExportedProgram) -> bool:
    return len(list(graph_modules(program.graph_module))) > 1


def _used_symbols(program: ExportedProgram) -> set:
    """Every symbol of the program's values and ranges."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    used: set = set(program.range_constraints)
    for node in program.graph_module.graph.nodes:
        used |= free_symbols(node.meta.get("val"))
    return used


def _first_change(before: List[str], after: List[str]) -> str:
    """The first line that differs, with the node it belongs to (for debug logs)."""
    for index, (a, b) in enumerate(zip(before, after)):
        if a != b:
            node = next((line for line in reversed(after[:index + 1])
                         if "|" in line and not line.startswith("meta:")), "")
            return f"{node[:120]!r}: {a[:160]!r} -> {b[:160]!r}"
    return f"the length ({len(before)} -> {len(after)} lines)"
