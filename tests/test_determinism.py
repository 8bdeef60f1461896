"""The same input lowers to the same ``.pte`` bytes in separate processes, whatever the hash seed.

Two fresh processes (``tests/pte_digests.py``) lower each case with fastlower and
with the reference under different ``PYTHONHASHSEED`` values.  Facts checked:

* the ``.pte`` bytes of both implementations are equal, in each process, and do
  not depend on the seed (the reference's do not either);
* duplicating shared constants runs in the iteration order of a ``set`` of
  names (``plan.duplication_order``, as the reference), so the order
  of the copies in the lowered program's ``state_dict`` and input specs depends
  on the seed; fastlower's layout equals the reference's under each seed.  Seeds
  "0" and "1" order ``{p_lin_weight, p_lin_bias}`` differently, so
  ``shared_param_xnnpack`` shows it;
* for the same reason, which error a tag with several broken candidates raises
  depends on the seed: a tagged user input (named by the error) or, in an edited
  program, the verifier run after the first duplicated constant.  fastlower raises
  the reference's error under each seed (``models.SEED_DEPENDENT_ERROR_CASES``;
  seeds "0", "1" and "4" put ``y``, ``x`` and ``b_k`` first in ``{b_k, x, y}``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pte_digests.py")
# the default run's cases; a decoder (llama1_xnnpack) the same way with -m slow
CASES = ["shared_param_xnnpack", "shared_const_demo"]
SEEDS = ["0", "1"]


def digests_under(seed: str, *args: str) -> dict:
    """``pte_digests.py <args>`` in a fresh process under ``PYTHONHASHSEED=seed``: its JSON."""
    env = dict(os.environ, PYTHONHASHSEED=seed)
    proc = subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


ERROR_CASES = ["tagged_inputs_and_shared_buffer", "tagged_inputs_and_shared_buffer_edited"]
ERROR_SEEDS = ["0", "1", "4"]


@pytest.fixture(scope="module")
def both_runs() -> dict:
    """Per seed, one process: the digests under ``SEEDS``, the errors under ``ERROR_SEEDS``."""
    found = {}
    for seed in sorted(set(SEEDS) | set(ERROR_SEEDS)):
        digests = CASES if seed in SEEDS else []
        errors = ERROR_CASES if seed in ERROR_SEEDS else []
        found[seed] = digests_under(seed, *digests, "--errors", *errors)
        if not digests:
            found[seed] = {"digests": {}, "errors": found[seed]}
    return found


@pytest.fixture(scope="module")
def runs(both_runs) -> dict:
    return {seed: both_runs[seed]["digests"] for seed in SEEDS}


def test_pte_bytes_equal_the_reference_in_every_process(runs):
    for seed, cases in runs.items():
        for case, impls in cases.items():
            assert impls["fastlower"]["pte"] == impls["reference"]["pte"], (seed, case)


@pytest.mark.parametrize("case", CASES)
def test_pte_bytes_do_not_depend_on_the_hash_seed(runs, case):
    reference = {runs[s][case]["reference"]["pte"] for s in SEEDS}
    fastlower = {runs[s][case]["fastlower"]["pte"] for s in SEEDS}
    assert len(reference) == 1, "the reference's .pte depends on the seed: compare per seed instead"
    assert len(fastlower) == 1


@pytest.mark.parametrize("case", CASES)
def test_layout_matches_the_reference_under_each_seed(runs, case):
    for seed in SEEDS:
        run = runs[seed][case]
        assert run["fastlower"]["layout"] == run["reference"]["layout"], seed
    if len({json.dumps(runs[s][case]["reference"]["layout"]) for s in SEEDS}) == 1:
        assert len({json.dumps(runs[s][case]["fastlower"]["layout"]) for s in SEEDS}) == 1


def test_duplication_order_depends_on_the_seed_in_the_reference(runs):
    """The documented fact: the copies' order follows the seed (fastlower follows the reference)."""
    layouts = [runs[s]["shared_param_xnnpack"]["reference"]["layout"][0][1] for s in SEEDS]
    assert sorted(layouts[0]) == sorted(layouts[1]) == ["p_lin_bias_copy_0", "p_lin_weight_copy_0"]
    assert layouts[0] != layouts[1]


@pytest.fixture(scope="module")
def error_runs(both_runs) -> dict:
    return {seed: both_runs[seed]["errors"] for seed in ERROR_SEEDS}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_matches_the_reference_under_each_seed(error_runs, case):
    for seed in ERROR_SEEDS:
        for path, result in error_runs[seed][case].items():
            assert result["diff"] is None, (seed, path, result["diff"])


def test_which_error_depends_on_the_seed_in_the_reference(error_runs):
    """The documented fact the previous test relies on: the seeds lead the reference to
    different errors (else it would not test the order)."""
    def first_error(case, seed):
        cls, message = error_runs[seed][case]["direct"]["reference"]
        return cls, message.split("\n")[0].strip()[-40:]

    plain = {first_error("tagged_inputs_and_shared_buffer", s) for s in ERROR_SEEDS}
    assert {m[-1] for _, m in plain} == {"x", "y"}
    edited = {first_error("tagged_inputs_and_shared_buffer_edited", s) for s in ERROR_SEEDS}
    assert len(edited) == 3, edited
    assert ("InternalError", "ed to be in range of [-2, 1], but got 2)") in edited, edited


@pytest.mark.slow
def test_a_decoders_pte_bytes_equal_the_references_whatever_the_seed():
    """The same facts for a decoder (llama1_xnnpack), one process per seed."""
    case = "llama1_xnnpack"
    runs = {seed: digests_under(seed, case, "--errors")["digests"][case] for seed in SEEDS}
    for seed, impls in runs.items():
        assert impls["fastlower"]["pte"] == impls["reference"]["pte"], seed
        assert impls["fastlower"]["layout"] == impls["reference"]["layout"], seed
    assert len({runs[s]["reference"]["pte"] for s in SEEDS}) == 1
    assert len({runs[s]["fastlower"]["pte"] for s in SEEDS}) == 1
