"""ExecuTorch's edge stage (ATen to Edge, before ``to_backend``) with the retraces that
change nothing skipped.

:mod:`.noop_retrace` decides when a ``run_decompositions(table)`` provably leaves a
program as it is; :mod:`.decompose` is ExecuTorch's
``_gen_edge_manager_for_partitioners`` with those calls skipped; :mod:`.verify` runs
both and compares (``FASTLOWER_EDGE_RETRACES=verify``).
"""
