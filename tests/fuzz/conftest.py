"""Fuzz suite setup: quiet ExecuTorch/fastlower logs, print the outcome counts at the end."""

import logging

import pytest
from tabulate import tabulate

from tests.fuzz import oracle


@pytest.fixture(scope="package", autouse=True)
def _quiet_logs():
    # package scope: ended before another package's tests run (under pytest-xdist too,
    # where packages interleave), so their logging is left as it was
    # XnnpackPartitioner and fastlower's undelegated-tag warnings, once per case
    logging.disable(logging.ERROR)
    yield
    logging.disable(logging.NOTSET)


def _seeds_of(defect: str, most: int = 8) -> str:
    seeds = sorted(s for s, v in oracle.RESULTS.items() if v.defect == defect)
    more = f" (+{len(seeds) - most})" if len(seeds) > most else ""
    return " ".join(map(str, seeds[:most])) + more


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts = oracle.outcome_counts()
    if not counts:
        return
    rows = [(o.name, o.value, counts.get(o, 0)) for o in oracle.Outcome]
    rows.append(("total", "", sum(counts.values())))
    terminalreporter.write_sep("=", "fastlower differential fuzz: outcomes")
    terminalreporter.write_line(tabulate(rows, headers=("outcome", "meaning", "cases")))
    defects = oracle.defect_counts()
    if defects:
        terminalreporter.write_line("")
        terminalreporter.write_line(tabulate(
            [(k, defects[k], oracle.KNOWN_OPEN_DEFECTS.get(k, "?"), _seeds_of(k))
             for k in sorted(defects)],
            headers=("known defect", "cases", "what", "case seeds (replay)")))
    if oracle.CHECKS:
        terminalreporter.write_line("")
        terminalreporter.write_line(tabulate(sorted(oracle.CHECKS.items()),
                                             headers=("deeper check", "cases")))
    if oracle.CRASHED_RUNTIME_SEEDS:
        terminalreporter.write_line("runtime crashed or failed (identical .pte from both) in case "
                                    "seeds: " + " ".join(map(str, oracle.CRASHED_RUNTIME_SEEDS)))
