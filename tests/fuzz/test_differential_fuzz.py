"""Differential fuzz: random programs x random partitioners, reference vs fastlower.

Default run: ``DEFAULT_CASES // oracle.CASES_PER_PROGRAM`` programs x
``oracle.CASES_PER_PROGRAM`` partitioner cases each (52 cases).
Slow mode: ``pytest -m slow tests/fuzz`` runs 500 cases (CI runs it after the default
run); the long run of 5,000 (about an hour) or any number with ``FASTLOWER_FUZZ_CASES=<n>``.

Replay one case from the seed printed on failure::

    FASTLOWER_FUZZ_SEED=<case seed> FASTLOWER_TEST_SRC=1 \\
        .venv/bin/python -m pytest tests/fuzz -k replay -s
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz import oracle

DEFAULT_CASES = 52
SLOW_CASES = 500
_ENV_CASES = os.environ.get("FASTLOWER_FUZZ_CASES")


def _check_program(program_seed: int) -> None:
    """Every partitioner case of one program; fails on the first MISMATCH."""
    built = None
    for k in range(oracle.CASES_PER_PROGRAM):
        seed = program_seed * oracle.CASES_PER_PROGRAM + k
        case, verdict, built = oracle.run_case(seed, built)
        if verdict.outcome is oracle.Outcome.MISMATCH:
            pytest.fail(
                f"fuzz case {seed}: {verdict.detail}\n{case.describe(built.recipe)}\n"
                f"replay: FASTLOWER_FUZZ_SEED={seed} FASTLOWER_TEST_SRC=1 "
                f".venv/bin/python -m pytest tests/fuzz -k replay -s",
                pytrace=False)


def _fuzz_settings(cases: int):
    return settings(
        max_examples=max(1, cases // oracle.CASES_PER_PROGRAM),
        deadline=None,
        derandomize=True,
        database=None,
        # a failing case reports its seed; shrinking integers would only re-run cases
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )


_PROGRAM_SEEDS = st.integers(min_value=0, max_value=2**30)


@pytest.mark.skipif(_ENV_CASES is not None, reason="FASTLOWER_FUZZ_CASES selects test_fuzz_sized")
@_fuzz_settings(DEFAULT_CASES)
@given(program_seed=_PROGRAM_SEEDS)
def test_fuzz_default(program_seed: int) -> None:
    _check_program(program_seed)


@pytest.mark.slow
@_fuzz_settings(SLOW_CASES)
@given(program_seed=_PROGRAM_SEEDS)
def test_fuzz_slow(program_seed: int) -> None:
    _check_program(program_seed)


@pytest.mark.skipif(_ENV_CASES is None, reason="set FASTLOWER_FUZZ_CASES=<n> to run n cases")
def test_fuzz_sized() -> None:
    @_fuzz_settings(int(_ENV_CASES or 0))
    @given(program_seed=_PROGRAM_SEEDS)
    def run(program_seed: int) -> None:
        _check_program(program_seed)

    run()


@pytest.mark.skipif("FASTLOWER_FUZZ_SEED" not in os.environ,
                    reason="set FASTLOWER_FUZZ_SEED=<case seed> to replay one case")
def test_replay() -> None:
    seed = int(os.environ["FASTLOWER_FUZZ_SEED"])
    case, verdict, built = oracle.run_case(seed)
    print(f"\n{case.describe(built.recipe)}\noutcome: {verdict.outcome.name} "
          f"{verdict.defect or ''}\n{verdict.detail}")
    assert verdict.outcome is not oracle.Outcome.MISMATCH, verdict.detail


def test_known_defect_switch_makes_cases_must_match(monkeypatch) -> None:
    """Removing a letter from KNOWN_OPEN_DEFECTS stops excusing its cases (seed 39 is a
    MethodProgramsPartitionerSpec naming a missing method, defect (c) while it is open)."""
    seed = 39
    case = oracle.draw_case(seed)
    assert case.missing_method
    monkeypatch.setattr(oracle, "KNOWN_OPEN_DEFECTS",
                        {k: v for k, v in oracle.KNOWN_OPEN_DEFECTS.items() if k != "c"})
    _, verdict, _ = oracle.run_case(seed)
    oracle.RESULTS.pop(seed, None)
    assert verdict.defect != "c"
    assert verdict.outcome in (oracle.Outcome.SAME_ERROR, oracle.Outcome.MISMATCH)
