"""ExecuTorch's own LLM export (``executorch.extension.llm.export.export_llm``), as users run it.

Each run is a fresh process running the unchanged pipeline: torchao quantization
(``8da4w`` or none), KV cache, the custom SDPA op, dynamic shapes, then
``to_edge_transform_and_lower`` with XNNPACK's two partitioners in turn, then
``to_executorch()``. The reference is ``python -m tests.pipeline.timed ...``;
fastlower is ``fastlower run -m tests.pipeline.timed ...`` (the user's zero-code
path). Both write the same timings (see ``timed.py``).

Weights are deterministic: with no checkpoint the pipeline builds the model on
``meta`` and resets only modules with ``reset_parameters``, so RMSNorm weights and
the RoPE tables would be uninitialised memory and two reference runs would give
different ``.pte`` files. :func:`model_files` saves a checkpoint of a seeded model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from .tree_memory import TreeSampler
from tests import python_children

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class LlmConfig:
    """A model size and quantization mode for ``export_llm``."""

    name: str
    dim: int
    n_layers: int
    n_heads: int
    vocab_size: int
    hidden_dim: Optional[int] = None
    qmode: Optional[str] = "8da4w"
    group_size: int = 32
    max_seq_length: int = 128
    n_kv_heads: Optional[int] = None  # grouped-query attention (Llama 3.2: 8)
    ffn_dim_multiplier: Optional[float] = None  # with multiple_of, the FFN's width
    multiple_of: int = 32

    def params(self) -> Dict[str, object]:
        params: Dict[str, object] = {"dim": self.dim, "n_layers": self.n_layers,
                                     "n_heads": self.n_heads, "vocab_size": self.vocab_size,
                                     "multiple_of": self.multiple_of, "norm_eps": 1e-5}
        if self.hidden_dim is not None:
            params["hidden_dim"] = self.hidden_dim
        if self.n_kv_heads is not None:
            params["n_kv_heads"] = self.n_kv_heads
        if self.ffn_dim_multiplier is not None:
            params["ffn_dim_multiplier"] = self.ffn_dim_multiplier
        return params

    @property
    def weights_name(self) -> str:
        """A folder name for the weights: the model's size only. The pipeline reads
        "int8" or "8da4w" anywhere in the checkpoint's path as "pre-quantized", so the
        quantization mode must not appear in it."""
        return (f"d{self.dim}-l{self.n_layers}-h{self.n_heads}-v{self.vocab_size}"
                f"-f{self.hidden_dim}-s{self.max_seq_length}"
                + (f"-kv{self.n_kv_heads}" if self.n_kv_heads else "")
                + (f"-m{self.ffn_dim_multiplier}x{self.multiple_of}"
                   if self.ffn_dim_multiplier else ""))

    def with_qmode(self, qmode: Optional[str]) -> "LlmConfig":
        suffix = qmode or "fp32"
        return dataclasses.replace(self, qmode=qmode,
                                   name=f"{self.name.rsplit('-', 1)[0]}-{suffix}")


# a tiny model for the default test run; stories15M and stories110M sizes for benchmarks,
# a wide, shallow one (Llama 3.2 1B's width, 4 layers, a small vocabulary) and a narrow,
# deep one (width 256, 24 layers) as other depths and widths
TINY = LlmConfig("tiny-8da4w", dim=64, n_layers=2, n_heads=4, vocab_size=256, hidden_dim=128,
                 max_seq_length=32)
STORIES15M = LlmConfig("stories15m-8da4w", dim=288, n_layers=6, n_heads=6, vocab_size=32000,
                       hidden_dim=768)
STORIES110M = LlmConfig("stories110m-8da4w", dim=768, n_layers=12, n_heads=12,
                        vocab_size=32000, hidden_dim=2048)
WIDE = LlmConfig("d2048l4-8da4w", dim=2048, n_layers=4, n_heads=16, vocab_size=8192,
                 hidden_dim=5632)
DEEP = LlmConfig("d256l24-8da4w", dim=256, n_layers=24, n_heads=8, vocab_size=32000,
                 hidden_dim=768)
# Llama-3.2-1B's shape (dim 2048, 32 heads, 8 KV heads, FFN 8192, vocabulary 128256) with
# N of its 16 layers; random weights, no download (issue 50)
LLAMA32_1B = LlmConfig("llama3.2-1b-8da4w", dim=2048, n_layers=16, n_heads=32,
                       vocab_size=128256, n_kv_heads=8, ffn_dim_multiplier=1.5,
                       multiple_of=256)
LLAMA32_1B_2L = dataclasses.replace(LLAMA32_1B, name="llama3.2-1b-2l-8da4w", n_layers=2)
CONFIGS = {c.name: c for c in (TINY, STORIES15M, STORIES110M, WIDE, DEEP, LLAMA32_1B,
                               LLAMA32_1B_2L)}


def model_files(config: LlmConfig, folder: Path, seed: int = 0,
                nudge: Optional[str] = None) -> Dict[str, Path]:
    """``params.json`` and a checkpoint of a seeded model (every weight and buffer set);
    ``nudge`` names one weight whose first element is moved by 0.5 (a one-parameter
    change of the checkpoint, large enough to change its group's scale under 8da4w)."""
    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    folder.mkdir(parents=True, exist_ok=True)
    params = folder / "params.json"
    checkpoint = folder / "weights.pth"
    if "int8" in str(checkpoint) or "8da4w" in str(checkpoint):
        raise ValueError(f"{checkpoint}: the pipeline reads 'int8'/'8da4w' in a checkpoint's "
                         "path as a pre-quantized checkpoint")
    if not (params.exists() and checkpoint.exists()):
        params.write_text(json.dumps(config.params()))
        torch.manual_seed(seed)
        model = construct_transformer(ModelArgs(**config.params(),
                                                max_seq_len=config.max_seq_length,
                                                max_context_len=config.max_seq_length))
        with torch.no_grad():  # RMSNorm weights are ones by default: make them distinct too
            for name, tensor in model.state_dict().items():
                if name.endswith("norm.weight"):
                    tensor.uniform_(0.5, 1.5)
            if nudge is not None:
                model.state_dict()[nudge].view(-1)[0] += 0.5
        torch.save(model.state_dict(), checkpoint)
    return {"params": params, "checkpoint": checkpoint}


def export_args(config: LlmConfig, files: Dict[str, Path], out_dir: Path) -> List[str]:
    """The ``export_llm`` command line of the issue (stories110m-style model, XNNPACK)."""
    args = ["base.model_class=stories110m", f"base.params={files['params']}",
            f"base.checkpoint={files['checkpoint']}", "model.use_kv_cache=True",
            "model.use_sdpa_with_kv_cache=True", "model.enable_dynamic_shape=True",
            "backend.xnnpack.enabled=True", "backend.xnnpack.extended_ops=True",
            f"export.max_seq_length={config.max_seq_length}",
            f"export.max_context_length={config.max_seq_length}",
            f"export.output_dir={out_dir}", "export.output_name=model.pte"]
    if config.qmode:
        args += [f"quantization.qmode={config.qmode}",
                 f"quantization.group_size={config.group_size}"]
    return args


@dataclasses.dataclass
class ExportRun:
    """One export in its own process."""

    impl: str
    config: str
    returncode: int
    process_seconds: float
    window_seconds: float  # to_edge_transform_and_lower + to_executorch
    to_backend_seconds: float
    etl_seconds: float
    to_executorch_seconds: float
    cache_hits: int
    cache_misses: int
    lowering_cache: List[Optional[str]]  # per to_edge_transform_and_lower call: "hit", "miss"...
    pte_sha256: str
    pte_bytes: int
    log: str
    # the timed calls in order, [name, start, end] in seconds since the target started,
    # and each to_edge_transform_and_lower's lowering-cache phases (key, load, lower, store)
    calls: List[List] = dataclasses.field(default_factory=list)
    lowering_cache_seconds: List[Optional[Dict[str, float]]] = dataclasses.field(
        default_factory=list)
    target_seconds: float = 0.0
    # per entry of ``calls``: the process's minor page faults at its start and end
    calls_minor_faults: List[List[int]] = dataclasses.field(default_factory=list)
    # memory, bytes: the exporting process's peak resident set (its ru_maxrss) and the
    # largest of its waited-for children's; per entry of ``calls``, the process's peak
    # so far at its start and end; sampled from outside (``tree_memory``): the peak of the
    # whole tree's summed PSS (forked workers' shared pages counted once) and of the
    # exporting process's RSS, and the timeline [seconds, root RSS, tree PSS, processes]
    peak_rss_bytes: int = 0
    # fastlower: per timed call, fake outputs known without a run (tests/pipeline/timed.py)
    fake_outputs: List[List[Any]] = dataclasses.field(default_factory=list)
    # per to_edge_transform_and_lower call: the retraces' memo's answers by operator
    retrace_memo: List[Dict[str, int]] = dataclasses.field(default_factory=list)
    # per to_edge_transform_and_lower, the edge stage's retraces [skipped, repeats, run]
    edge_retraces: List[List[int]] = dataclasses.field(default_factory=list)
    # fastlower: SymNode arithmetic answered from its memo / computed (in_process.sym_arith)
    sym_arith: Dict[str, int] = dataclasses.field(default_factory=dict)
    # fastlower: graph modules' code remembered / compiled (in_process.graph_code)
    graph_code: Dict[str, int] = dataclasses.field(default_factory=dict)
    children_peak_rss_bytes: int = 0
    calls_peak_rss: List[List[int]] = dataclasses.field(default_factory=list)
    calls_cpu_seconds: List[float] = dataclasses.field(default_factory=list)
    tree_peak_pss_bytes: int = 0
    sampled_peak_rss_bytes: int = 0
    tree_peak_processes: int = 0
    memory_timeline: List[List[float]] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.pte_sha256)


def run_export(impl: str, config: LlmConfig, work: Path, *, cache_dir: Optional[Path] = None,
               workers: Optional[int] = None, extra_env: Optional[Dict[str, str]] = None,
               nudge: Optional[str] = None, seed: int = 0, timeout: float = 3600,
               sample_interval: float = 0.2) -> ExportRun:
    """Export ``config`` in a fresh process with ``impl`` ("reference" or "fastlower");
    ``nudge``: the checkpoint with that one weight changed; ``seed``: the checkpoint of
    that seed (another seed: every weight different; see :func:`model_files`)."""
    weights = (config.weights_name + (f"-nudged-{nudge.replace('.', '_')}" if nudge else "")
               + (f"-seed{seed}" if seed else ""))
    files = model_files(config, work / "model" / weights, seed=seed, nudge=nudge)
    out_dir = work / f"out-{impl}-{time.monotonic_ns()}"
    out_dir.mkdir(parents=True)
    timings = out_dir / "timings.json"
    target = ["-m", "tests.pipeline.timed", str(timings), "-m",
              "executorch.extension.llm.export.export_llm", *export_args(config, files, out_dir)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(extra_env or {}))
    env.pop("FASTLOWER_CACHE_DIR", None)
    if impl == "reference":
        cmd = [sys.executable, *target]
    elif impl == "fastlower":  # the user's zero-code path
        cmd = [sys.executable, "-m", "fastlower", "run"]
        if workers is not None:
            cmd += ["--workers", str(workers)]
        if cache_dir is None:
            cmd += ["--no-cache"]
        else:
            env["FASTLOWER_CACHE_DIR"] = str(cache_dir)
        cmd += target
    else:
        raise ValueError(impl)
    start = time.perf_counter()
    with open(out_dir / "stdout.txt", "w+") as stdout, open(out_dir / "stderr.txt", "w+") as stderr:
        proc = python_children.popen(cmd, cwd=out_dir, env=env, stdout=stdout, stderr=stderr,
                                     text=True)
        with TreeSampler(proc.pid, interval=sample_interval) as sampler:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
        seconds = time.perf_counter() - start
        stdout.seek(0)
        stderr.seek(0)
        out_text, err_text = stdout.read(), stderr.read()
    times = json.loads(timings.read_text()) if timings.exists() else {}
    pte = out_dir / "model.pte"
    data = pte.read_bytes() if pte.exists() else b""
    etl = sum(times.get("to_edge_transform_and_lower", []))
    to_et = sum(times.get("to_executorch", []))
    return ExportRun(
        impl=impl, config=config.name, returncode=proc.returncode, process_seconds=seconds,
        window_seconds=etl + to_et, to_backend_seconds=sum(times.get("to_backend", [])),
        etl_seconds=etl, to_executorch_seconds=to_et,
        cache_hits=times.get("cache_hits", 0), cache_misses=times.get("cache_misses", 0),
        lowering_cache=list(times.get("lowering_cache", [])),
        pte_sha256=hashlib.sha256(data).hexdigest() if data else "", pte_bytes=len(data),
        log=(out_text[-4000:] + "\n" + err_text[-8000:]),
        calls=times.get("calls", []),
        lowering_cache_seconds=times.get("lowering_cache_seconds", []),
        target_seconds=times.get("target_seconds", 0.0),
        calls_minor_faults=times.get("calls_minor_faults", []),
        peak_rss_bytes=times.get("peak_rss_bytes", 0),
        fake_outputs=times.get("fake_outputs", []),
        retrace_memo=times.get("retrace_memo", []),
        edge_retraces=times.get("edge_retraces", []),
        sym_arith=times.get("sym_arith", {}),
        graph_code=times.get("graph_code", {}),
        children_peak_rss_bytes=times.get("children_peak_rss_bytes", 0),
        calls_peak_rss=times.get("calls_peak_rss", []),
        calls_cpu_seconds=times.get("calls_cpu_seconds", []),
        tree_peak_pss_bytes=sampler.peak_tree_pss, sampled_peak_rss_bytes=sampler.peak_root_rss,
        tree_peak_processes=sampler.peak_processes,
        memory_timeline=[list(sample) for sample in sampler.timeline])
