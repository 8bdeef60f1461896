"""ExecuTorch's edge stage (ATen to Edge, before ``to_backend``) with the retraces that
change nothing skipped.

:mod:`.noop_retrace` decides when a ``run_decompositions(table)`` provably leaves a
program as it is; :mod:`.retrace_meta` and :mod:`.retrace_history` write what such a
retrace still writes (node meta, ``from_node`` links); :mod:`.decompose` is ExecuTorch's
``_gen_edge_manager_for_partitioners`` with those calls skipped; :mod:`.stage` picks the
mode (``FASTLOWER_EDGE_RETRACES``); :mod:`.verify` compares.
"""
