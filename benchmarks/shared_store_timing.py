"""ExecuTorch's ``export_llm``: two processes, separate empty local folders, one S3 store.

Runs, each a new process (``tests/pipeline/export_llm.py``):

1. ``reference``: plain ``python`` (ExecuTorch's code);
2. ``filler``: ``fastlower run --workers 2``, an empty local folder, the store empty
   (moto's S3-compatible server on loopback): lowers, stores, uploads;
3. ``shared``: the same command with another empty local folder: served by the store;
4. ``stopped``: the same with a third empty folder and the server killed: lowers cold,
   and says why the store missed.

Prints each run's lowering window (``to_edge_transform_and_lower`` + ``to_executorch``)
and whole-process time, the ratios to the reference and the ``.pte`` digests (which
must all equal the reference's). Usage:
``.venv/bin/python benchmarks/shared_store_timing.py [CONFIG]`` (default
``stories15m-8da4w``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.pipeline.export_llm import CONFIGS, run_export  # noqa: E402
from tests.shared.servers import CREDENTIALS, MotoServer  # noqa: E402


def main(name: str = "stories15m-8da4w") -> int:
    config = CONFIGS[name]
    work = Path(tempfile.mkdtemp(prefix="shared-store-timing-"))
    server = MotoServer()
    try:
        env = dict(CREDENTIALS, FASTLOWER_SHARED_CACHE=f"s3://{server.bucket()}/ci",
                   FASTLOWER_SHARED_CACHE_ENDPOINT=server.endpoint)
        runs = {"reference": run_export("reference", config, work)}
        for kind in ("filler", "shared", "stopped"):
            if kind == "stopped":
                server.stop()
            runs[kind] = run_export("fastlower", config, work, workers=2,
                                    cache_dir=work / f"local-{kind}", extra_env=env)
    finally:
        server.stop()
    reference = runs["reference"]
    failed = False
    print(f"{name}: window = to_edge_transform_and_lower + to_executorch; work: {work}")
    for kind, run in runs.items():
        same = run.pte_sha256 == reference.pte_sha256 and run.returncode == 0
        failed |= not same
        print(f"{kind:10} window {run.window_seconds:7.2f} s "
              f"({reference.window_seconds / max(run.window_seconds, 1e-9):6.1f}x)  "
              f"process {run.process_seconds:7.2f} s "
              f"({reference.process_seconds / run.process_seconds:5.2f}x)  "
              f"lowering cache {run.lowering_cache}  pte {run.pte_sha256[:12]} "
              f"{'same' if same else 'DIFFERENT or failed'}")
        if kind == "stopped":
            told = [line for line in run.log.splitlines() if "shared cache" in line]
            print("  " + (told[0][:300] if told else "(the store's warning comes early on "
                                                      "stderr: run_export keeps only its tail)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
