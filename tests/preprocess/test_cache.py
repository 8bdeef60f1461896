"""The content-addressed preprocess cache: cold, warm, verify; the key; damaged entries;
several processes at once."""

import multiprocessing
import warnings
from pathlib import Path

import diskcache
import pytest
import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec

import fastlower
import fastlower.preprocess as pp
from fastlower.preprocess import keys

from .helpers import (
    PAD, LinearPartitioner, child_processes, edge_blocks, fingerprint, new_children,
)

BACKEND = "PreprocessTestEchoBackend"


def _lower(cache_dir, program=None, specs_for=None, partitioner=None, workers=1, **opts):
    program = program if program is not None else edge_blocks(4)
    partitioner = partitioner or LinearPartitioner(specs_for=specs_for)
    with pp.options(workers=workers, cache_dir=cache_dir, **opts):
        lowered = fastlower.to_backend(program, partitioner)
    report = fastlower.last_report()
    return lowered, report


def _hits(report):
    return [r["cache_hit"] for r in report.preprocess_records]


@pytest.mark.parametrize("workers", [1, 2])
def test_cold_warm_verify(tmp_path, workers):
    cold, report = _lower(tmp_path, workers=workers)
    assert _hits(report) == [False] * 4
    assert report.cache_misses == {BACKEND: 4} and report.cache_hits == {}
    warm, report = _lower(tmp_path, workers=workers)
    assert _hits(report) == [True] * 4
    assert report.cache_hits == {BACKEND: 4} and report.cache_misses == {}
    assert f"{BACKEND} 4 hits / 0 misses" in report.format()
    assert fingerprint(warm) == fingerprint(cold)
    verified, report = _lower(tmp_path, workers=workers, verify=True)
    assert _hits(report) == [True] * 4
    assert all(r["preprocess_seconds"] > 0 for r in report.preprocess_records)  # re-ran
    assert fingerprint(verified) == fingerprint(cold)


def test_environment_turns_the_cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTLOWER_CACHE_DIR", str(tmp_path))
    with pp.options(workers=1):
        fastlower.to_backend(edge_blocks(2), LinearPartitioner())
        fastlower.to_backend(edge_blocks(2), LinearPartitioner())
    assert fastlower.last_report().cache_hits == {BACKEND: 2}
    monkeypatch.delenv("FASTLOWER_CACHE_DIR")
    with pp.options(workers=1):
        fastlower.to_backend(edge_blocks(2), LinearPartitioner())
    assert fastlower.last_report().cache_hits == {} == fastlower.last_report().cache_misses


def test_verify_catches_a_result_that_changed(tmp_path, monkeypatch):
    children_before = child_processes()
    random = lambda k: [CompileSpec("random", b"1")] if k == 1 else []  # noqa: E731
    _lower(tmp_path, specs_for=random)
    monkeypatch.setenv("FASTLOWER_CACHE_VERIFY", "1")
    with pytest.raises(pp.CacheVerificationError, match="'tag1'"):
        _lower(tmp_path, specs_for=random)
    assert not new_children(children_before)


def _first_addmm_debug_handle(program, new):
    for node in program.graph.nodes:
        if node.op == "call_function" and "addmm" in str(node.target):
            node.meta["debug_handle"] = new
            return


def _bump_weight(program):
    name = next(k for k in program.state_dict if k.endswith("lins.2.weight"))
    program.state_dict[name].data[0, 0] += 1.0


@pytest.mark.parametrize("change, missed", [
    ("compile_spec", [1]),
    ("weight", [2]),
    ("debug_handle", [0]),
])
def test_each_key_ingredient_change_is_a_miss(tmp_path, change, missed):
    _lower(tmp_path)
    program = edge_blocks(4)
    specs_for = None
    if change == "compile_spec":
        specs_for = lambda k: [CompileSpec("opt", b"2")] if k == 1 else []  # noqa: E731
    elif change == "weight":
        _bump_weight(program)
    else:
        _first_addmm_debug_handle(program, 10_000)
    _, report = _lower(tmp_path, program=program, specs_for=specs_for)
    assert [i for i, h in enumerate(_hits(report)) if not h] == missed


def test_backend_source_digest_change_is_a_miss(tmp_path, monkeypatch):
    package = tmp_path / "src" / "flpp_source_backend"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "backend.py").write_text(
        "from typing import final\n"
        "from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult\n"
        "@final\n"
        "class FlppSourceDigestBackend(BackendDetails):\n"
        "    @staticmethod\n"
        "    def preprocess(program, compile_specs):\n"
        "        return PreprocessResult(processed_bytes=program.graph_module.code.encode())\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    from flpp_source_backend.backend import FlppSourceDigestBackend

    store = tmp_path / "cache"
    partitioner = lambda: LinearPartitioner(FlppSourceDigestBackend)  # noqa: E731
    _lower(store, partitioner=partitioner())
    _, report = _lower(store, partitioner=partitioner())
    assert _hits(report) == [True] * 4
    before = keys.source_digest(FlppSourceDigestBackend)
    with open(package / "backend.py", "a") as f:
        f.write("# an edit\n")
    assert keys.source_digest(FlppSourceDigestBackend) == before  # cached per process
    keys.clear_source_digests()
    assert keys.source_digest(FlppSourceDigestBackend) != before
    _, report = _lower(store, partitioner=partitioner())
    assert _hits(report) == [False] * 4
    keys.clear_source_digests()


def test_key_ignores_process_noise_and_covers_versions(tmp_path, monkeypatch):
    from fastlower.preprocess.jobs import PreprocessJob
    from .helpers import PreprocessTestEchoBackend

    def key_of(program):
        return keys.cache_key(PreprocessJob(0, BACKEND, PreprocessTestEchoBackend, program, [],
                                            "tag0", "forward", False))

    # two exports: other seq_nr, from_node ids
    a, b = edge_blocks(2, fresh=True), edge_blocks(2, fresh=True)
    assert key_of(a) == key_of(b)
    base = key_of(a)
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    keys.versions.cache_clear()
    try:
        assert key_of(a) != base
    finally:
        monkeypatch.undo()
        keys.versions.cache_clear()


def _damage(store: Path, how: str) -> int:
    """Damage every entry of the cache in ``store``; the number damaged."""
    with diskcache.Cache(str(store)) as c:
        names = list(c.iterkeys())
        for key in names:
            raw = c.get(key)
            if how == "truncated":
                c.set(key, raw[: len(raw) // 2])
            elif how == "garbled":
                c.set(key, raw[:-5] + bytes(b ^ 0xFF for b in raw[-5:]))
            elif how == "other_version":
                c.set(key, raw.replace(b"format=", b"format=9", 1))
            elif how == "not_bytes":
                c.set(key, {"something": "else"})
    return len(names)


@pytest.mark.parametrize("how", ["truncated", "garbled", "other_version", "not_bytes"])
def test_damaged_entries_are_misses_with_one_warning(tmp_path, how):
    cold, _ = _lower(tmp_path)
    assert _damage(tmp_path, how) == 4
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again, report = _lower(tmp_path)
    damaged = [w for w in caught if issubclass(w.category, pp.CacheWarning)]
    assert len(damaged) == 1 and "4 damaged" in str(damaged[0].message)
    assert _hits(report) == [False] * 4
    assert fingerprint(again) == fingerprint(cold)
    _, report = _lower(tmp_path)  # rewritten: hits again
    assert _hits(report) == [True] * 4


def test_truncated_value_file_is_a_miss(tmp_path):
    pad = lambda k: [CompileSpec("pad", b"1")]  # noqa: E731
    cold, _ = _lower(tmp_path, specs_for=pad)
    files = sorted(tmp_path.rglob("*.val"))
    assert len(files) == 4  # entries above 32 KiB live in files
    for path in files[:2]:
        path.write_bytes(path.read_bytes()[: PAD // 3])
    files[2].unlink()  # a missing value file: diskcache reports a plain miss
    with pytest.warns(pp.CacheWarning, match="2 damaged"):
        again, report = _lower(tmp_path, specs_for=pad)
    assert sorted(_hits(report)) == [False, False, False, True]
    assert fingerprint(again) == fingerprint(cold)


def _lower_in_child(store: str, n: int) -> None:
    with pp.options(workers=1, cache_dir=store):
        fastlower.to_backend(edge_blocks(n), LinearPartitioner())


def test_two_processes_write_the_same_cache_at_once(tmp_path):
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_lower_in_child, args=(str(tmp_path), 6)) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=120)
    assert [c.exitcode for c in children] == [0, 0]
    cold, report = _lower(tmp_path, program=edge_blocks(6))
    assert _hits(report) == [True] * 6
    with pp.options(workers=1):
        uncached = fastlower.to_backend(edge_blocks(6), LinearPartitioner())
    assert fingerprint(cold) == fingerprint(uncached)


def test_size_limit_evicts(tmp_path):
    pad = lambda k: [CompileSpec("pad", b"1"), CompileSpec("k", str(k).encode())]  # noqa: E731
    with pp.options(cache_size=3 * PAD):
        _lower(tmp_path, program=edge_blocks(6), specs_for=pad)
    with diskcache.Cache(str(tmp_path)) as c:
        assert c.volume() <= 6 * PAD  # diskcache culls down to the limit as it writes
        assert len(c) < 6


def test_unusable_cache_directory_warns_and_lowers(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.warns(pp.CacheWarning, match="cannot be opened"):
        lowered, report = _lower(blocker / "cache")
    assert len(report.preprocess_records) == 4
    assert all(r["cache_hit"] is None for r in report.preprocess_records)
    with pp.options(workers=1):
        assert fingerprint(lowered) == fingerprint(
            fastlower.to_backend(edge_blocks(4), LinearPartitioner()))
