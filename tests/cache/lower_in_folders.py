"""Lower the base call once per cache folder, in one new process (the corruption tests).

``python -m tests.cache.lower_in_folders SPEC.json``: ``SPEC.json`` lists
``{"folder": ..., "shared": URL or null, "pte": path}``; for each, in order, the
base call (``helpers.small_aten()``, ``helpers.base_args()``) is lowered with
``fastlower.cache.to_edge_transform_and_lower`` and ``fastlower.cache.to_executorch``
with that folder (and that shared store, or none), the ``.pte`` written to ``pte``.
``SPEC.json.out`` gets per folder ``lowering_cache`` and the messages of the
``CacheWarning``s seen. Any exception fails the process.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path


def main(spec_path: Path) -> None:
    import fastlower.cache
    import fastlower.preprocess
    from fastlower import settings
    from fastlower.cache.shared import tier
    from tests.cache.helpers import base_args, small_aten

    results = []
    for item in json.loads(spec_path.read_text()):
        if item["shared"]:
            os.environ[settings.SHARED_CACHE] = item["shared"]
        else:
            os.environ.pop(settings.SHARED_CACHE, None)
        tier.forget()
        with warnings.catch_warnings(record=True) as seen, \
                fastlower.preprocess.options(cache_dir=Path(item["folder"]), workers=1):
            warnings.simplefilter("always")
            manager = fastlower.cache.to_edge_transform_and_lower(small_aten(), **base_args())
            Path(item["pte"]).write_bytes(bytes(fastlower.cache.to_executorch(manager).buffer))
            tier.forget()  # the uploads finished before the next folder
        report = fastlower.report_for(manager)
        results.append({"lowering_cache": report.lowering_cache if report else None,
                        "warnings": [str(w.message) for w in seen if issubclass(
                            w.category, fastlower.preprocess.CacheWarning)]})
    spec_path.with_name(spec_path.name + ".out").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
