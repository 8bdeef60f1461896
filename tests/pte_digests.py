"""Lower models with fastlower and the reference and print their ``.pte`` digests as JSON.

Run in a fresh process by ``tests/test_determinism.py`` (one process per
``PYTHONHASHSEED``)::

    PYTHONHASHSEED=1 python tests/pte_digests.py llama1_xnnpack shared_const_demo
    PYTHONHASHSEED=4 python tests/pte_digests.py --errors tagged_inputs_and_shared_buffer

prints, per case and implementation, the sha256 of the ``.pte`` bytes and the
in-memory layout that duplicating shared constants can reorder: the input
names, ``state_dict`` and ``constants`` keys of the lowered program and of every
delegate's ``original_module``, in order.  With ``--errors``, lowers cases of
``models.SEED_DEPENDENT_ERROR_CASES`` and prints both implementations' errors; cases
before ``--errors`` and after it: ``{"digests": {...}, "errors": {...}}`` (one process
for both, one interpreter start fewer).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def digests(case_name: str) -> dict:
    from executorch.exir.backend.backend_api import to_backend as reference_to_backend

    import fastlower
    from tests.models import registry as models
    from tests.differential import harness

    out = {}
    for label, impl in (("fastlower", fastlower.to_backend), ("reference", reference_to_backend)):
        lowered = harness.lower(impl, models.MODEL_CASES[case_name].build, "direct")
        layout = program_layout(lowered.epm.exported_program())
        et = harness.to_executorch(lowered)
        out[label] = {"pte": hashlib.sha256(bytes(et.buffer)).hexdigest(), "layout": layout}
    return out


def program_layout(program) -> list:
    """Names whose order duplication decides, for the program and each delegate's original."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    def one(ep) -> list:
        return [[getattr(s.arg, "name", None) for s in ep.graph_signature.input_specs],
                list(ep.state_dict), list(ep.constants)]

    layout = [one(program)]
    for name, module in program.graph_module.named_modules():
        if isinstance(module, LoweredBackendModule):
            layout.append([name] + one(module.original_module))
    return layout


def errors(case_name: str) -> dict:
    """Per path: each implementation's error (class, message) and whether fastlower's is
    the reference's (``harness.assert_same_error``: its class or a subclass, its message)."""
    from executorch.exir.backend.backend_api import to_backend as reference_to_backend

    import fastlower
    from tests.models import registry as models
    from tests.differential import harness

    build = models.SEED_DEPENDENT_ERROR_CASES[case_name]
    out = {}
    for path in ("direct", "spec", "manager"):
        ref = harness.lower_error(reference_to_backend, build, path)
        got = harness.lower_error(fastlower.to_backend, build, path)
        try:
            harness.assert_same_error(ref, got)
            diff = None
        except AssertionError as exc:
            diff = str(exc)
        out[path] = {"reference": [ref.type.__qualname__, ref.message],
                     "fastlower": [got.type.__qualname__, got.message], "diff": diff}
    return out


def main(args) -> None:
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    if args[:1] == ["--errors"]:
        print(json.dumps({case: errors(case) for case in args[1:]}))
    elif "--errors" in args:
        split = args.index("--errors")
        print(json.dumps({"digests": {case: digests(case) for case in args[:split]},
                          "errors": {case: errors(case) for case in args[split + 1:]}}))
    else:
        print(json.dumps({case: digests(case) for case in args}))


if __name__ == "__main__":
    main(sys.argv[1:])
