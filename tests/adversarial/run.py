"""Adversarial lowerings in a process of their own (a subprocess of the tests).

* ``python -m tests.adversarial.run lower OUT.json IMPL STRUCTURE [CACHE] -- [MUTATION ...]``
  lowers one structure (``tests.adversarial.structures``) with the mutations set
  (``tests.adversarial.weights``) as ``reference`` (ExecuTorch) or ``fastlower``
  (default mode, caches in CACHE); the ``.pte`` goes to ``OUT.json.pte``.
* ``python -m tests.adversarial.run batch JOBS.json`` lowers each job of the list in
  JOBS.json (``{"impl", "structure", "mutations", "cache"}``) in turn and writes
  ``JOBS.json.out`` (the outcomes) and ``JOBS.json.K.pte``.
* ``python -m tests.adversarial.run fuzz OUT.json FIRST STOP CACHE`` draws one model per
  seed in ``range(FIRST, STOP)`` and lowers each both ways in this process, one cache
  folder for all (so later seeds are refit from, and derive with templates of, earlier
  ones); OUT.json holds the outcomes.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from tests.adversarial import lowering, structures, weights


def program_with(structure: str, mutations: List[str], seed: int = 0):
    program = structures.program(structure)
    weights.apply(program, mutations, structures.LITERALS.get(structure, ()), seed)
    return program


def lower(structure: str, impl: str, mutations: List[str], cache_dir: Path,
          seed: int = 0) -> lowering.Outcome:
    program = program_with(structure, mutations, seed)
    partitioners = structures.partitioners(structure)
    if impl == "reference":
        return lowering.reference(program, partitioners)
    return lowering.fastlower(program, partitioners, cache_dir)


def fuzz_one(seed: int, cache_dir: Path) -> Dict[str, Any]:
    """One seed's model lowered both ways; ``same`` and, where the ``.pte`` differ, the
    largest difference of their outputs in ExecuTorch's runtime."""
    rng = random.Random(seed)
    structure = rng.choice(structures.NAMES)
    mutations = weights.draw(structures.program(structure), rng)
    expected = lower(structure, "reference", mutations, cache_dir, seed)
    got = lower(structure, "fastlower", mutations, cache_dir, seed)
    found: Dict[str, Any] = {"seed": seed, "structure": structure, "mutations": mutations,
                             "same": got.same_as(expected), "reference": expected.describe(),
                             "fastlower": got.describe(), "cache": got.lowering_cache,
                             "derived": (got.classes or {}).get("derived", 0),
                             "refit_refused": got.refit}
    if not found["same"] and expected.pte is not None and got.pte is not None:
        inputs = structures.example_inputs(structure)
        try:
            found["output_difference"] = lowering.largest_difference(expected.pte, got.pte,
                                                                     inputs)
        except Exception as exc:  # the runtime refused one of them: say so
            found["output_difference"] = f"not run: {exc!r}"
    return found


def main(argv: List[str]) -> None:
    command, out = argv[0], Path(argv[1])
    if command == "lower":
        impl, structure = argv[2], argv[3]
        rest = argv[4:]
        split = rest.index("--") if "--" in rest else len(rest)
        cache_dir = Path(rest[0]) if split > 0 else out.parent / "cache"
        start = time.perf_counter()
        outcome = lower(structure, impl, rest[split + 1:], cache_dir)
        if outcome.pte is not None:
            out.with_name(out.name + ".pte").write_bytes(outcome.pte)
        out.write_text(json.dumps({"error": outcome.error, "cache": outcome.lowering_cache,
                                   "classes": outcome.classes,
                                   "has_pte": outcome.pte is not None,
                                   "seconds": time.perf_counter() - start}))
    elif command == "batch":
        results = []
        for k, job in enumerate(json.loads(out.read_text())):
            outcome = lower(job["structure"], job["impl"], job["mutations"],
                            Path(job.get("cache") or out.parent / "cache"))
            if outcome.pte is not None:
                out.with_name(f"{out.name}.{k}.pte").write_bytes(outcome.pte)
            results.append({"error": outcome.error, "cache": outcome.lowering_cache,
                            "classes": outcome.classes, "refit": outcome.refit,
                            "retraces": outcome.retraces,
                            "has_pte": outcome.pte is not None})
        out.with_name(out.name + ".out").write_text(json.dumps(results))
    elif command == "fuzz":
        first, stop, cache_dir = int(argv[2]), int(argv[3]), Path(argv[4])
        results = []
        for seed in range(first, stop):
            results.append(fuzz_one(seed, cache_dir))
            out.write_text(json.dumps(results, indent=1))  # what ran so far, if stopped
            print(f"seed {seed}: {results[-1]['structure']} {results[-1]['mutations']} "
                  f"{'same' if results[-1]['same'] else 'DIFFERENT'}", flush=True)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
