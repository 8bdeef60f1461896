"""Partitioner benchmarks on programs as users make them.

``partitioner.partition(program)`` with the reference's code (``fastlower.partitioners.
reference()``) and with fastlower's (``accelerated()``), same session, fresh deep copy of
the pristine program per call (made outside the timing), tags compared after each case:

* models (``fastlower.frontends.examples.user_models``): ExecuTorch's ``examples/models/llama``
  Transformer built from a params dict as ``export_llm`` does (``executorch_llama``), and
  Hugging Face decoders built from a config (``hf_llama``, ``hf_gpt2``), dim 64;
* paths: ``to_edge`` (plain ``to_edge`` then ``to_backend``: linear decomposed into
  permute + addmm) and ``tal`` (the program ``to_edge_transform_and_lower`` partitions);
* partitioners: ``XnnpackPartitioner()``, ``VulkanPartitioner()`` and ``CoreMLPartitioner()``
  (the last two torch.fx ``CapabilityBasedPartitioner``-based; each if importable).

Ids: ``<partitioner>-<path>-<model>-L<layers>-<impl>``.  ``test_user_models_summary``
prints the table (ratio = reference / fastlower), fastlower's log-log slope per series
(end points: smallest to largest layer count) and writes ``--user-json``.

Run (see benchmarks/README.md, "Partitioning on user programs"):
``python -m pytest benchmarks/test_user_models_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import time
from typing import Any, Dict, List, Tuple

import pytest
from tabulate import tabulate

import fastlower.partitioners as fp

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS: Dict[Tuple[str, str, str, int, str], Dict[str, Any]] = {}
IMPLS = ("reference", "fastlower")


def _partitioner(kind: str):
    if kind == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return XnnpackPartitioner()
    if kind == "coreml":
        from executorch.backends.apple.coreml.partition import CoreMLPartitioner

        return CoreMLPartitioner()
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

    return VulkanPartitioner()


def _csv(config, name: str) -> List[str]:
    return [x.strip() for x in config.getoption(name).split(",") if x.strip()]


def pytest_generate_tests(metafunc):
    if "ucase" not in metafunc.fixturenames:
        return
    cfg = metafunc.config
    layers = sorted(int(x) for x in _csv(cfg, "--user-layers"))
    tal_layers = sorted(int(x) for x in _csv(cfg, "--user-tal-layers"))
    vulkan_layers = sorted(int(x) for x in _csv(cfg, "--user-vulkan-layers"))
    ref_max = cfg.getoption("--user-ref-max-layers")
    cases = []
    for part in _csv(cfg, "--user-partitioners"):
        for path in _csv(cfg, "--user-paths"):
            capability = part in ("vulkan", "coreml")
            sizes = vulkan_layers if capability else (tal_layers if path == "tal" else layers)
            models = (_csv(cfg, "--user-vulkan-models") if capability
                      else _csv(cfg, "--user-models"))
            if capability and path == "tal":
                # only XNNPACK's tal program differs (linear kept): the others run on to_edge
                continue
            for model in models:
                for n in sizes:
                    for impl in IMPLS:
                        if impl == "reference" and n > ref_max:
                            continue
                        cases.append((part, path, model, n, impl))
    metafunc.parametrize("ucase", cases,
                         ids=["-".join(map(str, c[:3])) + f"-L{c[3]}-{c[4]}" for c in cases])


class _Programs:
    """Pristine programs per (partitioner, path, model, layers), built once per session."""

    def __init__(self) -> None:
        self._cache: Dict[Tuple[str, str, str, int], Any] = {}  # (part, path, model, n)

    def pristine(self, part: str, path: str, model: str, n: int):
        key = (part if path == "tal" else "", path, model, n)  # to_edge: one for all
        if key not in self._cache:
            from fastlower.frontends.examples import user_models

            if path == "tal":
                self._cache[key] = user_models.transform_and_lower_program(
                    model, n, _partitioner(part))
            else:
                self._cache[key] = user_models.edge_program(model, n)
        return self._cache[key]


@pytest.fixture(scope="session")
def user_programs():
    return _Programs()


class _ProposeTimer:
    """Time inside ``CapabilityBasedPartitioner``/``GroupBasedPartitioner.propose_partitions``."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self):
        from executorch.exir.backend.canonical_partitioners.group_partitioner import (
            GroupBasedPartitioner,
        )
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

        self._saved = []
        for cls in (CapabilityBasedPartitioner, GroupBasedPartitioner):
            inner = cls.__dict__["propose_partitions"]
            self._saved.append((cls, inner))

            def timed(partitioner, _inner=inner):
                t = time.perf_counter()
                try:
                    return _inner(partitioner)
                finally:
                    self.seconds += time.perf_counter() - t

            cls.propose_partitions = timed
        return self

    def __exit__(self, *exc):
        for cls, inner in self._saved:
            cls.propose_partitions = inner


def _tags(result) -> Tuple[List[Tuple[str, Any]], List[str]]:
    program = result.tagged_exported_program
    return ([(n.name, n.meta.get("delegation_tag")) for n in program.graph.nodes],
            list(result.partition_tags))


_TAGS: Dict[Tuple[str, str, str, int], Dict[str, Any]] = {}


def test_user_partition(benchmark, ucase, user_programs):
    part, path, model, n, impl = ucase
    if part == "vulkan":
        pytest.importorskip("executorch.backends.vulkan.partitioner.vulkan_partitioner")
    if part == "coreml":
        pytest.importorskip("executorch.backends.apple.coreml.partition")
    if model.startswith("hf_"):
        pytest.importorskip("transformers")
    logging.disable(logging.WARNING)  # XnnpackPartitioner logs on every call
    try:
        pristine = user_programs.pristine(part, path, model, n)
        if not getattr(user_programs, f"warm_{part}", False):  # one-off set-up costs
            for context in (fp.reference, fp.accelerated):
                with context():
                    _partitioner(part).partition(
                        copy.deepcopy(user_programs.pristine(part, path, model, 1)))
            setattr(user_programs, f"warm_{part}", True)
        samples: List[Dict[str, float]] = []
        rounds = 1 if impl == "reference" and n > 8 else 3

        def make_args():
            return (copy.deepcopy(pristine), _partitioner(part)), {}

        def run(program, partitioner):
            context = fp.accelerated() if impl == "fastlower" else fp.reference()
            with context, _ProposeTimer() as propose:
                t = time.perf_counter()
                result = partitioner.partition(program)
                seconds = time.perf_counter() - t
            samples.append({"partition_s": seconds, "propose_s": propose.seconds})
            _TAGS.setdefault(ucase[:4], {})[impl] = _tags(result)

        benchmark.pedantic(run, setup=make_args, rounds=rounds, iterations=1)
    finally:
        logging.disable(logging.NOTSET)
    best = min(samples, key=lambda s: s["partition_s"])
    best.update(nodes=len(pristine.graph.nodes), partitions=len(_TAGS[ucase[:4]][impl][1]))
    RESULTS[ucase] = best
    benchmark.extra_info.update(best)
    tags = _TAGS[ucase[:4]]
    if len(tags) == 2:
        best["same_tags"] = tags["reference"] == tags["fastlower"]
        assert best["same_tags"], f"{ucase[:4]}: fastlower's tags differ from the reference's"


def _slope(points: List[Tuple[int, float]]) -> float:
    (x0, y0), (x1, y1) = points[0], points[-1]
    return math.log(y1 / y0) / math.log(x1 / x0)


def test_user_models_summary(request):
    """Table, ratios and fastlower's log-log slope per series (after every case)."""
    if not RESULTS:
        pytest.skip("no user-model case ran")
    rows, slopes = [], {}
    for (part, path, model, n, impl), r in sorted(RESULTS.items()):
        if impl != "fastlower":
            continue
        ref = RESULTS.get((part, path, model, n, "reference"))
        rows.append([part, path, model, n, r["nodes"], r["partitions"],
                     f"{ref['partition_s']:.3f}" if ref else "-", f"{r['partition_s']:.3f}",
                     f"{ref['partition_s'] / r['partition_s']:.1f}x" if ref else "-",
                     f"{ref['propose_s']:.3f}" if ref else "-", f"{r['propose_s']:.3f}",
                     {True: "yes", False: "NO"}.get(r.get("same_tags"), "-")])
        slopes.setdefault((part, path, model), []).append((n, r["partition_s"]))
    headers = ["partitioner", "path", "model", "layers", "nodes", "partitions", "reference s",
               "fastlower s", "ratio", "ref propose s", "fastlower propose s", "same tags"]
    text = tabulate(rows, headers=headers, tablefmt="github")
    slope_rows = [[*k, f"{pts[0][0]}->{pts[-1][0]}", f"{_slope(pts):.2f}"]
                  for k, pts in sorted(slopes.items()) if len(pts) >= 2]
    if slope_rows:
        text += "\n\nfastlower partition() log-log slope\n" + tabulate(
            slope_rows, headers=["partitioner", "path", "model", "layers", "slope"],
            tablefmt="github")
    out = (request.config.getoption("--user-json")
           or os.path.join(HERE, "user_models_results.json"))
    with open(out, "w") as f:
        json.dump({"rows": [dict(zip(headers, row)) for row in rows],
                   "slopes": [dict(zip(["partitioner", "path", "model", "layers", "slope"], s))
                              for s in slope_rows]}, f, indent=1)
    print("\n" + text)
