"""The atheris harness of the native core (``fuzz/fuzz_core.py``), bounded for CI.

* every seed of the committed corpus (``fuzz/corpus``, made by
  ``fuzz/make_corpus.py`` from real encoded graphs) replays without a crash or a
  core/twin mismatch;
* the byte format decodes what its writer wrote;
* the fuzzer itself runs for ``FASTLOWER_FUZZ_SECONDS`` (default 15; 60 in the
  ``slow`` set) from the corpus in a subprocess and must exit cleanly: a crash of
  the interpreter, an undocumented exception or a core/twin disagreement fails the test and leaves
  the input in the test's temporary directory (replay it with
  ``.venv/bin/python fuzz/fuzz_core.py <file>``).
"""

from __future__ import annotations

import glob
import os
import resource
import subprocess
import sys

import pytest

atheris = pytest.importorskip("atheris", reason="atheris is not installed (pip install '.[test]')")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ_DIR = os.path.join(ROOT, "fuzz")
CORPUS = os.path.join(FUZZ_DIR, "corpus")
SECONDS = int(os.environ.get("FASTLOWER_FUZZ_SECONDS", "15"))
SLOW_SECONDS = 60


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, FUZZ_DIR)
    try:
        import corpus_format
        import fuzz_core
    finally:
        sys.path.remove(FUZZ_DIR)
    return fuzz_core, corpus_format


def test_corpus_is_committed():
    seeds = glob.glob(os.path.join(CORPUS, "*"))
    assert len(seeds) >= 50
    assert any("llama1_xnnpack" in os.path.basename(s) for s in seeds)


def test_every_seed_replays(harness):
    fuzz_core, _ = harness
    for path in sorted(glob.glob(os.path.join(CORPUS, "*"))):
        with open(path, "rb") as f:
            fuzz_core.TestOneInput(f.read())


def test_byte_format_round_trip(harness):
    _, cf = harness
    w = cf.Writer()
    values = [0, 1, 127, 128, 300, 2**40]
    signed = [0, -1, 1, -2**33, 2**62, -3]
    for v in values:
        w.uint(v)
    w.sints(signed)
    w.text("aten_add_Tensor_1\u00e9\ud800")
    w.texts(["getitem", ""], 4)
    r = cf.Reader(atheris.FuzzedDataProvider(w.bytes()))
    assert [r.uint() for _ in values] == values
    assert r.sints() == signed
    assert r.text() == "aten_add_Tensor_1\u00e9\ud800"
    assert r.texts(4) == ["getitem", ""]
    assert r.uint() == 0  # exhausted: zeros


def test_seed_decodes_to_the_recorded_llama_graph(harness):
    """A simulator seed carries the real graph: the planner's sequence fuses its partitions."""
    fuzz_core, cf = harness
    path = sorted(glob.glob(os.path.join(CORPUS, "llama1_xnnpack_0_sim_single_*")))[0]
    with open(path, "rb") as f:
        r = cf.Reader(atheris.FuzzedDataProvider(f.read()))
    assert r.uint() == cf.SIMULATOR
    tag_names = r.texts(cf.MAX_TAGS)
    is_submodule = bool(r.byte() & 1)
    g = fuzz_core.read_graph(r)
    ops = fuzz_core.read_sim_ops(r)
    assert len(g.op) > 50 and not is_submodule and "aten_linear_default" in g.names
    sim = fuzz_core._core.FusionSimulator(g, tag_names, is_submodule, None)
    for op in ops:
        fuzz_core.apply_op(sim, op, g, tag_names)
    assert len(sim.partitions) >= 5 and sim.lowered_count == len(sim.partitions)


def rss_limit_mb(headroom_mb: int = 4096) -> int:
    """libFuzzer's RSS limit for a child of this process.

    libFuzzer reads its RSS as ``ru_maxrss``, which Linux carries across ``execve``: the
    fuzzer starts with this pytest process's peak (about 4 GB after the default suite) and
    a fixed 4096 MB limit would flag an OOM the fuzzer never had.  The limit is that
    inherited peak plus the headroom the fuzzer itself may use.
    """
    inherited_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # KiB on Linux
    return inherited_mb + headroom_mb


def test_fuzzer_runs_clean(tmp_path):
    """Bounded atheris run from the committed corpus (new inputs go to tmp_path, not the corpus)."""
    _fuzz(tmp_path, SECONDS)


@pytest.mark.slow
def test_fuzzer_runs_clean_longer(tmp_path):
    _fuzz(tmp_path, SLOW_SECONDS)


def _fuzz(tmp_path, seconds: int) -> None:
    new_inputs = tmp_path / "new"
    new_inputs.mkdir()
    cmd = [sys.executable, os.path.join(FUZZ_DIR, "fuzz_core.py"), str(new_inputs), CORPUS,
           f"-max_total_time={seconds}", "-timeout=30", f"-rss_limit_mb={rss_limit_mb()}",
           f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 300)
    log = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines()
                    if not line.startswith("INFO: Instrumenting"))
    artifacts = [p.name for p in tmp_path.iterdir()
                 if p.name.startswith(("crash-", "timeout-", "oom-"))]
    seed = next((line for line in log.splitlines() if line.startswith("INFO: Seed:")),
                "seed not printed")
    assert proc.returncode == 0 and not artifacts, (
        f"fuzzer failed ({seed}): {artifacts}\n{log[-6000:]}")
    runs = [line for line in log.splitlines() if "stat::number_of_executed_units" in line]
    assert runs and int(runs[-1].split(":")[-1]) > 100, log[-2000:]


def test_make_corpus_regenerates_the_seeds(harness, tmp_path):
    """``fuzz/make_corpus.py`` on one model into a temporary directory: a seed of each kind
    per recorded graph, each replays, and a plan seed carries the graph the lowering
    planned (its partitions are fused)."""
    fuzz_core, cf = harness
    sys.path.insert(0, FUZZ_DIR)
    saved_path = list(sys.path)
    try:
        import make_corpus
    finally:
        sys.path[:] = [p for p in saved_path if p != FUZZ_DIR]
    out = tmp_path / "corpus"
    count = make_corpus.main(["--out", str(out), "--cases", "cond_demo", "--no-llama"])
    seeds = sorted(out.iterdir())
    assert count == len(seeds) > 0
    kinds = {"sim_single", "sim_multi", "plan_single", "plan_multi", "group", "contract",
             "identity", "names"}
    top = [p for p in seeds if p.name.startswith("cond_demo_0_")]
    assert {k for k in kinds for p in top if f"_{k}_" in p.name} == kinds
    assert any(p.name.startswith("cond_demo_1_") for p in seeds)  # a cond body, recorded too
    for path in seeds:
        fuzz_core.TestOneInput(path.read_bytes())
    plan_seed = next(p for p in top if "_plan_single_" in p.name)
    r = cf.Reader(atheris.FuzzedDataProvider(plan_seed.read_bytes()))
    assert r.uint() == cf.PLAN_GRAPH
    tag_names = r.texts(cf.MAX_TAGS)
    assert not r.byte() & 1  # the top-level graph
    g = fuzz_core.read_graph(r)
    assert "cond" in g.names and tag_names
