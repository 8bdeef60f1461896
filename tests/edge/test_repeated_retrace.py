"""A retrace that repeats an earlier retrace of the same edge stage is skipped
(``fastlower.in_process.edge.repeated_retrace``).

On decoders with a dynamic sequence length and XNNPACK's two partitioners, the second
partitioner's default-table retrace repeats the first's: it is skipped, and the Edge
programs, the lowered programs and the ``.pte`` are ExecuTorch's (export_llm's own
program, whose retraces also grow the shape environment with unbacked symbols:
``tests/pipeline/test_export_llm.py``). Each guard of the rule is then broken on its own,
and each time the retrace is not taken for a repeat.
"""

from __future__ import annotations

import copy

import pytest
import torch

from fastlower.in_process import shape_env_growth
from fastlower.in_process.edge import decompose, repeated_retrace, stage
from fastlower.in_process.shape_env_state import shape_env_state, state_difference
from tests.edge.models import aten_program
from tests.edge.test_edge_stage_differential import _lower, _same_lowering

DYNAMIC = ("executorch_llama-dynamic", "hf_llama-dynamic")


@pytest.mark.parametrize("family", DYNAMIC)
def test_a_repeat_is_skipped_and_the_lowering_is_executorchs(family, monkeypatch):
    _same_lowering(lambda: aten_program(family, 2), "dq+xnnpack", monkeypatch)
    assert (decompose.SKIPPED.repeats, decompose.SKIPPED.run) == (1, 3)


def test_verify_mode_runs_the_repeat_and_finds_it_equal(monkeypatch):
    monkeypatch.setenv("FASTLOWER_EDGE_RETRACES", "verify")
    _lower(lambda: aten_program("executorch_llama-dynamic", 1), "dq+xnnpack", fastlower=True)
    assert decompose.SKIPPED.repeats == 1


def test_verify_mode_catches_a_repeat_written_wrong(monkeypatch):
    # a skip that forgot the from_node links a retrace adds must be caught
    monkeypatch.setenv("FASTLOWER_EDGE_RETRACES", "verify")
    monkeypatch.setattr(repeated_retrace, "add_retrace_links", lambda root: None)
    with pytest.raises(stage.EdgeStageVerificationError, match="from_node"):
        _lower(lambda: aten_program("executorch_llama-dynamic", 1), "dq+xnnpack",
               fastlower=True)


# --- the guards, one at a time --------------------------------------------------------------

def _table():
    from executorch.exir.program._program import _default_decomposition_table

    return _default_decomposition_table()


@pytest.fixture(scope="module")
def decomposed():
    """A dynamic decoder, functionalized and decomposed with the default table: one more
    default-table retrace returns it up to names."""
    program = aten_program("executorch_llama-dynamic", 1).run_decompositions({})
    return program.run_decompositions(_table())


@pytest.fixture
def remembered(decomposed):
    """A memory holding one default-table retrace of ``decomposed``, and its result."""
    memory = repeated_retrace.RetraceMemory()
    result = memory.run(copy.deepcopy(decomposed), _table())
    assert len(memory.records) == 1
    return memory, result


def test_the_result_of_a_remembered_retrace_repeats_it(remembered):
    memory, result = remembered
    assert memory.repeat_of(result, _table()) is not None


def test_a_retrace_that_changes_the_program_is_not_remembered():
    memory = repeated_retrace.RetraceMemory()
    memory.run(aten_program("executorch_llama-dynamic", 1).run_decompositions({}), _table())
    assert memory.records == []


def test_another_table_is_not_a_repeat(remembered):
    memory, result = remembered
    table = _table()
    table.pop(next(iter(table)))
    assert memory.repeat_of(result, table) is None


def test_a_table_with_another_decomposition_is_not_a_repeat(remembered):
    memory, result = remembered
    table = _table()
    table[next(iter(table))] = lambda *args, **kwargs: None
    assert memory.repeat_of(result, table) is None


def _first_operator(program):
    """The first operator node with a tensor value."""
    return next(n for n in program.graph_module.graph.nodes if n.op == "call_function"
                and isinstance(n.target, torch._ops.OpOverload)
                and isinstance(n.meta.get("val"), torch.Tensor))


@pytest.mark.parametrize("change", ["stack_trace", "nn_module_stack", "name", "val"])
def test_a_program_unlike_the_remembered_result_is_not_a_repeat(remembered, change):
    memory, result = remembered
    node = _first_operator(result)
    if change == "name":
        node.name = node.name + "_renamed"
    elif change == "val":
        node.meta["val"] = node.meta["val"].to(torch.float64)
    elif change == "nn_module_stack":
        node.meta["nn_module_stack"] = {}
    else:
        node.meta[change] = "  File \"elsewhere.py\", line 1"
    assert memory.repeat_of(result, _table()) is None


def test_a_key_a_retrace_drops_is_not_a_difference(remembered):
    # an operator node's key outside what a retrace gives (a partitioner's tag) is
    # dropped by the retrace unread: the program still repeats, and the skip drops it
    memory, result = remembered
    node = _first_operator(result)
    node.meta["a_partitioners_tag"] = True
    repeat = memory.repeat_of(result, _table())
    assert repeat is not None
    repeat.write(result)
    assert "a_partitioners_tag" not in node.meta


def test_a_shape_environment_changed_for_the_program_is_not_a_repeat(remembered):
    memory, result = remembered
    env = repeated_retrace.shape_env_of(result)
    (symbol,) = [s for s in env.var_to_range if str(s).startswith("s")][:1]
    saved = env.var_to_range[symbol]
    try:
        from torch.utils._sympy.value_ranges import ValueRanges

        env.var_to_range[symbol] = ValueRanges(saved.lower, saved.upper - 1)
        assert memory.repeat_of(result, _table()) is None
    finally:
        env.var_to_range[symbol] = saved
    assert memory.repeat_of(result, _table()) is not None


# --- the shape environment's growth, replayed ------------------------------------------------

def _grow(env, originals):
    """What a retrace does to the shape environment per bound unbacked symbol: a fresh
    copy, ranged and size-like as the original, renamed to it."""
    for original in originals:
        fresh = env.create_unbacked_symint().node.expr
        env.pending_fresh_unbacked_symbols.clear()
        env.var_to_range[fresh] = env.var_to_range[original]
        if original in env.size_like:
            env.size_like.add(fresh)
        env._rename_unbacked_to(fresh, original)


def test_the_replayed_growth_is_the_growth_itself():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    originals = [env.create_unbacked_symint().node.expr for _ in range(3)]
    env.pending_fresh_unbacked_symbols.clear()
    env._constrain_range_for_size(originals[0], min=0, max=126)
    before = shape_env_state(env)
    _grow(env, originals)  # the remembered retrace
    growth = shape_env_growth.recorded_growth(before, shape_env_state(env))
    assert growth is not None and growth.count == 3
    _grow(env, [env.create_unbacked_symint().node.expr])  # other symbols, in between
    env.pending_fresh_unbacked_symbols.clear()
    repeat = repeated_retrace.Repeat(repeated_retrace._Record([], (), [], {}, None, growth), env)
    start = shape_env_state(env)
    expected = repeat.expected_state(start)
    real = copy.deepcopy(env)
    _grow(real, originals)  # the retrace itself
    repeat.replay()
    assert state_difference(shape_env_state(real), shape_env_state(env)) == set()
    assert state_difference(expected, shape_env_state(env)) == set()
    assert shape_env_state(env)["unbacked_symint_counter"] == start["unbacked_symint_counter"] + 3
