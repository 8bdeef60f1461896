"""Fuzz suite setup: quiet ExecuTorch/fastlower logs, print the outcome counts at the end."""

import logging

import pytest
from tabulate import tabulate

from tests.fuzz import oracle


@pytest.fixture(scope="session", autouse=True)
def _quiet_logs():
    # XnnpackPartitioner and fastlower's undelegated-tag warnings, once per case
    logging.disable(logging.ERROR)
    yield
    logging.disable(logging.NOTSET)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not oracle.OUTCOME_COUNTS:
        return
    rows = [(o.name, o.value, oracle.OUTCOME_COUNTS.get(o, 0)) for o in oracle.Outcome]
    rows.append(("total", "", sum(oracle.OUTCOME_COUNTS.values())))
    terminalreporter.write_sep("=", "fastlower differential fuzz: outcomes")
    terminalreporter.write_line(tabulate(rows, headers=("outcome", "meaning", "cases")))
    if oracle.DEFECT_COUNTS:
        terminalreporter.write_line("")
        terminalreporter.write_line(tabulate(
            [(k, oracle.DEFECT_COUNTS[k], oracle.KNOWN_OPEN_DEFECTS.get(k, "?"))
             for k in sorted(oracle.DEFECT_COUNTS)],
            headers=("known defect", "cases", "what")))
