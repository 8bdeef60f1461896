"""The execution programs of a ``to_executorch()`` served from the cache (``.execution``).

They are not stored: a served manager knows its methods at once and makes the programs
when one is first read, from a copy of the ``EdgeProgramManager`` (never rewriting the
caller's), checking the new ``.pte`` against the served one. A manager changed in place
since the hit raises ``ExecutionProgramsUnavailable`` instead of programs of another
lowering. (That the programs equal a fresh run's, for every model of the differential
suite, is ``test_hits.test_hit_equals_the_reference``.)
"""

from __future__ import annotations

import warnings

import pytest
import torch

import fastlower.cache
from fastlower.cache import ExecutionProgramsUnavailable
from fastlower.cache.execution import LazyExecutionPrograms
from tests.differential import harness as H

from .helpers import base_args, cache_at, lower, small_aten


def _served(tmp_path):
    """A to_executorch() of a fresh lowering, served from the cache filled by a first one."""
    with cache_at(tmp_path), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, _ = lower(small_aten(), **base_args())
        stored = fastlower.cache.to_executorch(first)
        edge, report = lower(small_aten(), **base_args())
        assert report.lowering_cache == "hit"
        served = fastlower.cache.to_executorch(edge)
    return edge, stored, served


def test_served_programs_are_made_when_first_read_and_equal_a_fresh_run(tmp_path):
    edge, stored, served = _served(tmp_path)
    programs = served._execution_programs
    assert isinstance(programs, LazyExecutionPrograms)
    assert served.methods == stored.methods == {"forward"}
    assert programs._programs is None, "the execution programs were made before anyone asked"
    assert served.buffer == stored.buffer
    before = {m: H.input_state(p) for m, p in edge._edge_programs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = served.exported_program()
    assert programs._programs is not None
    d = H.Diffs()
    H.compare_exported_programs(d, "forward", stored.exported_program(), program)
    d.raise_if_any("the execution program made again differs from the stored run's")
    # made from a copy: the caller's manager is not rewritten (the reference's is)
    assert {m: H.input_state(p) for m, p in edge._edge_programs.items()} == before
    assert served.exported_program() is program  # made once


def test_a_manager_changed_since_the_hit_raises_instead_of_other_programs(tmp_path):
    edge, _, served = _served(tmp_path)
    graph = edge.exported_program().graph
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):  # an in-place edit after to_executorch()
        graph.call_function(torch.ops.aten.relu.default, (output.args[0][0],))
    with pytest.raises(ExecutionProgramsUnavailable, match="changed since"):
        served.exported_program()
    assert served.buffer  # the served .pte stays usable
