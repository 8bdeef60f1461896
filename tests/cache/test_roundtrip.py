"""The serializer (``fastlower.cache.serialize``) on every model of the differential suite.

Each model is lowered by fastlower on one of its paths (control flow, several
methods, shared and mutated buffers, constants, chains ...), written as a cache
entry and read back; the copy must be the lowering, by the differential harness
(graph code, node names, args, meta, users order, signatures, state, every
delegate and its program), and give the same ``.pte``.
"""

from __future__ import annotations

import functools
import warnings

import pytest

from fastlower.cache import entry
from fastlower.trust.seal import Seal
from tests.differential import harness as H
from tests.models.registry import MODEL_CASES


def _params():
    for case in MODEL_CASES.values():
        path = next(p for p in case.paths if p != "etl") if any(
            p != "etl" for p in case.paths) else "etl"
        marks = [pytest.mark.slow] if case.slow else []
        yield pytest.param(case, path, id=case.name, marks=marks)


def _copy(manager):
    """The manager's programs written as an entry and read back."""
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program._program import EdgeProgramManager

    seal = functools.partial(Seal, b"k" * 32, "lowering", "roundtrip")
    chunks = entry.encode({}, {"programs": dict(manager._edge_programs)}, seal())
    steps = entry.read(entry.ChunkReader(chunks), seal())
    next(steps)
    programs = next(steps)["programs"]
    return EdgeProgramManager(programs, manager._config_methods,
                              EdgeCompileConfig(_check_ir_validity=False))


@pytest.fixture(scope="module")
def impl_under_test():
    """fastlower's ``to_backend`` (an import failure fails the test, never falls back)."""
    return H.load_fastlower()


@pytest.mark.parametrize("case,path", list(_params()))
def test_entry_copy_is_the_lowering(case, path, impl_under_test):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = H.lower(impl_under_test, case.build, path)
        copied = _copy(lowered.epm)
        H.assert_same_lowering(lowered.epm, copied, header="the entry's copy differs")
        original_et = lowered.epm.to_executorch()
        copied_et = copied.to_executorch()
    H.assert_same_executorch(original_et, copied_et)
