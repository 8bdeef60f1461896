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
from fastlower.cache.trust.seal import Seal
from tests.differential import harness as H
from tests.models.registry import MODEL_CASES, SECOND_CASES


def _params():
    for case in MODEL_CASES.values():
        path = next(p for p in case.paths if p != "etl") if any(
            p != "etl" for p in case.paths) else "etl"
        marks = [pytest.mark.slow] if case.slow or case.name in SECOND_CASES else []
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


def test_large_bytes_are_written_out_of_the_pickle_and_read_into_one_object():
    import os

    from fastlower.cache.serialize.writer import BLOB_MIN_BYTES

    seal = functools.partial(Seal, b"k" * 32, "lowering", "blobs")
    big, other = os.urandom(BLOB_MIN_BYTES), os.urandom(BLOB_MIN_BYTES + 3)
    small = os.urandom(BLOB_MIN_BYTES - 1)
    payload = {"big": big, "again": big, "other": other, "small": small, "nested": [other]}
    chunks = entry.encode({}, payload, seal())
    serialized = chunks.serialized
    # each large object once, by identity, and no copy of it in the pickle
    assert [id(b) for b in serialized.blobs] == [id(big), id(other)]
    assert len(serialized.pickled) < len(small) + 4096
    assert big not in serialized.pickled and small in serialized.pickled
    # the store's check rebuilds from the objects themselves, no copy
    rebuilt = entry.rebuild(chunks)
    assert rebuilt["big"] is big and rebuilt["nested"][0] is other
    # a reader gets equal bytes, shared where they were shared
    steps = entry.read(entry.ChunkReader(chunks), seal())
    next(steps)
    back = next(steps)
    assert back == payload and type(back["big"]) is bytes
    assert back["big"] is back["again"] and back["nested"][0] is back["other"]
    # a cut in the new section is a damaged entry, as anywhere else
    whole = b"".join(bytes(c) for c in chunks)
    cut = entry.read(entry.ChunkReader([whole[:-100]]), seal())
    with pytest.raises(entry.DamagedEntry):
        next(cut)
