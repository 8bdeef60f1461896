"""Lower ExecuTorch's Llama (3 layers, fp32, XNNPACK) from one seed's weights in a
process of its own: ``python -m tests.structure.lower_checkpoint OUT.json SEED``.

fastlower's ``to_edge_transform_and_lower`` (under ``fastlower.patch``) with the cache
folder ``FASTLOWER_CACHE_DIR`` and the lowering cache off, so every partition goes
through preprocess: served by the preprocess cache, derived, or preprocessed.
``OUT.json``: the report's ``preprocess_classes`` and cache hits, and the ``.pte``
(written to ``OUT.json.pte``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    out, seed = Path(sys.argv[1]), int(sys.argv[2])
    from fastlower import last_report
    from tests.edge.models import partitioners
    from tests.structure.models import aten_program, lower

    _, program = lower(aten_program("executorch_llama", "fp32", seed=seed),
                       partitioners("xnnpack"), fastlower=True)
    report = last_report()
    out.with_name(out.name + ".pte").write_bytes(program.buffer)
    out.write_text(json.dumps({"classes": report.preprocess_classes,
                               "hits": sum(report.cache_hits.values()),
                               "partitions": len(report.preprocess_records)}))


if __name__ == "__main__":
    main()
