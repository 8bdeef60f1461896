"""Run a module or script with the lowering cache bound, timing it (a subprocess of the tests).

``python -m tests.cache.run_cached OUT.json -m MODULE ARGS...`` binds
``fastlower.cache.to_edge_transform_and_lower`` (and ``fastlower.cache.to_executorch``)
where ExecuTorch's ``to_edge_transform_and_lower`` (and
``EdgeProgramManager.to_executorch``) are, and fastlower's ``to_backend`` with
``fastlower.patch.installed()``, then runs ``tests.pipeline.timed`` (which times
whatever is bound). The cache folder comes from ``FASTLOWER_CACHE_DIR``. Until the
lead registers the cached entry points in ``fastlower.patch``, this is how a test
runs a user's program "under fastlower" with the cache.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from unittest import mock


def main(argv):
    import executorch.exir as exir
    import executorch.exir.program._program as program

    import fastlower.cache
    import fastlower.patch
    from tests.pipeline import timed

    with ExitStack() as stack:
        stack.enter_context(fastlower.patch.installed())
        for module in (exir, program):
            stack.enter_context(mock.patch.object(
                module, "to_edge_transform_and_lower", fastlower.cache.to_edge_transform_and_lower))
        if hasattr(fastlower.cache, "to_executorch"):
            stack.enter_context(mock.patch.object(
                program.EdgeProgramManager, "to_executorch", fastlower.cache.to_executorch))
        timed.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
