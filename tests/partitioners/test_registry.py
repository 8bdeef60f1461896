"""The patch registry: every patch installed once, inert outside ``accelerated()`` (per
thread and per asyncio task), and removed by ``uninstall()`` (every original back)."""

from __future__ import annotations

import asyncio
import sys
import threading

import torch
from torch.fx.node import Node

import fastlower.partitioners as fp
from fastlower.partitioners import registry
from fastlower.partitioners.source_partitions import (
    get_source_partitions as native_get_source_partitions,
)
from fastlower.partitioners.source_partitions import reference_get_source_partitions

_MISSING = object()


def _bindings():
    """Every attribute the registry patches, as it is now (plus each module binding of
    get_source_partitions)."""
    import executorch.backends.xnnpack.partition.config.gemm_configs  # noqa: F401 (its patch)

    out = {}
    for patch in registry._patches:
        owner = registry._resolve_owner(patch)
        out[patch.target] = vars(owner).get(patch.name, _MISSING)
    for name, module in list(sys.modules.items()):
        if module is not None and not name.startswith("fastlower") and hasattr(module, "__dict__"):
            for attr, value in list(vars(module).items()):
                if value is reference_get_source_partitions \
                        or value is native_get_source_partitions:
                    out[f"{name}.{attr}"] = value
    return out


def test_uninstall_restores_every_binding():
    fp.uninstall()
    original = _bindings()
    assert original["torch.fx.node.Node._prepend"] is _MISSING  # torch's C base method
    with fp.accelerated():
        patched = _bindings()
        listed = fp.installed_patches()
    changed = {k for k in original if patched.get(k) is not original[k]}
    assert {p.target for p in registry._patches} <= changed  # every registered patch applied
    assert "torch.fx.passes.utils.source_matcher_utils.get_source_partitions" in changed
    assert len(listed) >= len(changed)
    fp.uninstall()
    after = _bindings()
    assert all(after[k] is original[k] for k in original)
    assert fp.installed_patches() == []
    assert Node._prepend is torch._C._NodeBase._prepend
    # and it comes back on the next use
    with fp.accelerated():
        assert fp.is_active() and fp.installed_patches()


def test_inert_outside_and_isolated_between_tasks():
    async def inside(results):
        with fp.accelerated():
            results["inside_before"] = fp.is_active()
            await asyncio.sleep(0.01)
            results["inside_after"] = fp.is_active()

    async def outside(results):
        await asyncio.sleep(0.005)  # runs while the other task is inside its block
        results["outside"] = fp.is_active()

    async def main():
        results = {}
        await asyncio.gather(inside(results), outside(results))
        return results

    results = asyncio.run(main())
    assert results == {"inside_before": True, "inside_after": True, "outside": False}


def test_threads_install_once_concurrently():
    fp.uninstall()
    barrier = threading.Barrier(4)
    seen = []

    def worker():
        barrier.wait()
        with fp.accelerated():
            seen.append(fp.is_active())

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == [True] * 4
    targets = [line.split(":")[0] for line in fp.installed_patches()]
    assert len(targets) == len(set(targets))  # each binding patched once
    assert not fp.is_active()


def test_replacement_left_alone_if_someone_else_patched_over_it():
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    fp.uninstall()
    reference = CapabilityBasedPartitioner.__dict__["propose_partitions"]
    with fp.accelerated():
        assert CapabilityBasedPartitioner.__dict__["propose_partitions"] is not reference
    theirs = lambda self: []  # noqa: E731
    CapabilityBasedPartitioner.propose_partitions = theirs
    try:
        fp.uninstall()
        assert CapabilityBasedPartitioner.__dict__["propose_partitions"] is theirs
    finally:
        CapabilityBasedPartitioner.propose_partitions = reference
