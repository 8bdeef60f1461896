"""One ``export_llm`` run's memory, phase by phase: where the peak is reached.

    .venv/bin/python benchmarks/export_llm_memory_timeline.py stories15m-8da4w cold WORK

``reference`` (plain ``python``) or ``cold`` (``fastlower run --workers 2``, the cache
folder ``WORK/cache``: empty the first time, so run ``cold`` again for a warm run).
Prints the exporting process's peak RSS, its largest child's, the peak of the tree's
summed PSS (sampled every 0.1 s, ``tests/pipeline/tree_memory.py``), and for each
timed call (``tests/pipeline/timed.py``) the process's peak RSS at its start and end;
writes the sampled timeline ``[seconds, root RSS, tree PSS, processes]`` to
``WORK/timeline-KIND.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.pipeline.export_llm import CONFIGS, run_export  # noqa: E402

MIB = 2 ** 20


def main(name: str, kind: str, work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    config = CONFIGS[name]
    if kind == "reference":
        run = run_export("reference", config, work, sample_interval=0.1)
    else:
        run = run_export("fastlower", config, work, workers=2, cache_dir=work / "cache",
                         sample_interval=0.1)
    print(f"{kind}: ok {run.ok}, .pte {run.pte_sha256[:12]}, {run.process_seconds:.1f} s, "
          f"lowering cache {run.lowering_cache}")
    print(f"peak RSS {run.peak_rss_bytes / MIB:.0f} MiB, largest child "
          f"{run.children_peak_rss_bytes / MIB:.0f} MiB, tree PSS "
          f"{run.tree_peak_pss_bytes / MIB:.0f} MiB (sampled root "
          f"{run.sampled_peak_rss_bytes / MIB:.0f} MiB, up to "
          f"{run.tree_peak_processes} processes)")
    for (call, start, end), (before, after) in zip(run.calls, run.calls_peak_rss):
        print(f"  {call:30s} {start:7.1f}-{end:7.1f} s  peak {before / MIB:7.0f} -> "
              f"{after / MIB:7.0f} MiB")
    (work / f"timeline-{kind}.json").write_text(json.dumps(run.memory_timeline))
    if not run.ok:
        print(run.log)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
