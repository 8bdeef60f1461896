"""The partitioner check compares node targets by identity with a table local to one
comparison that holds its targets: a freed target's ``id`` reused by a new one can
never make two different targets look the same, and threads share nothing."""

from __future__ import annotations

import gc
import threading
import warnings

import pytest
import torch

import fastlower
from fastlower.core import encode, plan
from fastlower.errors import GraphModifiedError
from tests.report.toy import add_mul_partitioner, add_mul_sin_program


def _local_function():
    def sin_lookalike(x):
        return torch.sin(x)

    return sin_lookalike


class _RetargetingPartitioner:
    """Tags add/mul as usual, then points the ``sin`` node at a new local function."""

    def __init__(self, seen_ids):
        self.inner = add_mul_partitioner()
        self.seen_ids = seen_ids

    def __call__(self, program):
        result = self.inner(program)
        (sin,) = [n for n in program.graph.nodes if "sin" in str(n.target)]
        target = _local_function()
        self.seen_ids.append(id(target))
        sin.target = target
        return result

    def __str__(self) -> str:
        return "RetargetingPartitioner"


def test_retargeted_node_is_caught_whatever_ids_are_reused():
    """A local function set as a node's target, freed and made again lowering after
    lowering: every lowering fails naming the node, none passes the check."""
    seen_ids = []
    for _ in range(6):
        program = add_mul_sin_program()
        with warnings.catch_warnings(), pytest.raises(GraphModifiedError) as caught:
            warnings.simplefilter("ignore")
            fastlower.to_backend(program, _RetargetingPartitioner(seen_ids))
        assert caught.value.node is not None and "sin" in caught.value.node
        del program, caught
        gc.collect()
    assert len(seen_ids) == 6


def test_a_numbered_target_cannot_be_freed_while_its_table_lives():
    """The id-reuse case itself: a target freed after it was numbered, and a new one
    made in its place. The table keeps the first alive, so the new one cannot get
    its id, and gets its own key."""
    import weakref

    keys = encode.TargetKeys()
    first = _local_function()
    first_key, alive = keys(first), weakref.ref(first)
    del first
    gc.collect()
    assert alive() is not None  # held by the table: its id cannot be reused
    again = _local_function()
    assert id(again) != id(alive()) and keys(again) != first_key
    del keys
    gc.collect()
    assert alive() is None  # the table, and what it held, lasts one comparison


def test_keys_are_per_table():
    keys = encode.TargetKeys()
    functions = [_local_function() for _ in range(3)]
    assert [keys(f) for f in functions] == [0, 1, 2]
    assert keys(functions[1]) == 1
    assert keys("aten.add") == keys("".join(["aten.", "add"]))  # strings by value
    assert encode.TargetKeys()(functions[2]) == 0  # a new table starts afresh


def test_structure_difference_in_threads_at_once():
    """Comparisons in several threads at once each see only their own targets."""
    functions = [_local_function() for _ in range(8)]
    graphs = []
    for f in functions:
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        graph.output(graph.call_function(f, (x,)))
        graphs.append(torch.fx.GraphModule(torch.nn.Module(), graph))
    results = {}
    start = threading.Barrier(len(graphs))

    def compare(i):
        start.wait(30)
        results[i] = [plan.structure_difference(graphs[i], graphs[j]) for j in range(len(graphs))
                      for _ in range(20)]

    threads = [threading.Thread(target=compare, args=(i,)) for i in range(len(graphs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i, found in results.items():
        expected = [(-1 if i == j else 1) for j in range(len(graphs)) for _ in range(20)]
        assert found == expected
    assert len(results) == len(graphs)
