"""Two processes with separate, empty local folders share one store: the second hits.

Each store is real: a directory, and moto's S3-compatible server on loopback. The
first process (``tests.cache.lower_once``: ExecuTorch's ``to_edge_transform_and_lower``
and ``to_executorch`` under ``fastlower.patch``, the demo add/mul partitioner) misses
both entries and uploads them; the second, with a folder of its own, is served both
from the store, with the first one's ``.pte``, which is ExecuTorch's.
"""

from __future__ import annotations

from pathlib import Path

from tests.cache import lower_once

from .servers import CREDENTIALS


def _store(kind: str, tmp_path: Path, moto) -> tuple:
    if kind == "directory":
        folder = tmp_path / "team-store"
        folder.mkdir(parents=True)
        return f"file://{folder}", {}, lambda: sorted(
            str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    bucket = moto.bucket()
    env = dict(CREDENTIALS, FASTLOWER_SHARED_CACHE_ENDPOINT=moto.endpoint)
    return f"s3://{bucket}/ci/cache", env, lambda: sorted(moto.objects(bucket))


def test_a_second_process_with_an_empty_folder_hits_every_entry(tmp_path, moto):
    """Both stores at once: the two first processes run side by side, then the two second."""
    for kind in ("directory", "s3"):
        (tmp_path / kind).mkdir()
    stores = {kind: _store(kind, tmp_path / kind, moto) for kind in ("directory", "s3")}

    def start(kind: str, name: str):
        url, env, _ = stores[kind]
        out = tmp_path / kind / f"{name}.json"
        return out, lower_once.start(out, ["base"], tmp_path / kind / f"local-{name}",
                                     patched=True, env=dict(env, FASTLOWER_SHARED_CACHE=url),
                                     real=True)  # real interpreters: other hash seeds

    firsts = {kind: start(kind, "first") for kind in stores}
    first = {kind: lower_once.outcome(process, out) for kind, (out, process) in firsts.items()}
    stored = {kind: stores[kind][2]() for kind in stores}
    seconds = {kind: start(kind, "second") for kind in stores}
    second = {kind: lower_once.outcome(process, out) for kind, (out, process) in seconds.items()}
    reference = lower_once.reference_pte("base")
    for kind in stores:
        step, step2 = first[kind]["steps"][0], second[kind]["steps"][0]
        assert (step["lowering_cache"], step["to_executorch_hit"]) == ("miss", False), kind
        assert first[kind]["warnings"] == [] and second[kind]["warnings"] == [], kind
        # the lowering's entry, its structure record (fastlower.cache.refit), to_executorch's
        assert len(stored[kind]) == 3, stored
        assert (step2["lowering_cache"], step2["to_executorch_hit"]) == ("hit", True), kind
        assert step2["key"] == step["key"]
        assert step2["pte"] == step["pte"] == reference, kind
        assert stores[kind][2]() == stored[kind], kind  # nothing written again
    assert all(name.startswith("ci/cache/fastlower-v1/") for name in stored["s3"]), stored
