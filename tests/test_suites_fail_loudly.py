"""The differential and conformance suites fail when fastlower cannot be imported; they
compare the reference with itself only when ``FASTLOWER_CONFORMANCE_IMPL=reference``
asks for it. Each case is a pytest run in a subprocess where ``import fastlower``
raises (a package of that name ahead of the installed one on ``PYTHONPATH``; its folder's
``sitecustomize`` puts the path finder first, so an editable install's finder, which
comes before ``sys.path``, does not find the real one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def broken_fastlower(tmp_path_factory) -> Path:
    shadow = tmp_path_factory.mktemp("broken") / "fastlower"
    shadow.mkdir()
    (shadow / "__init__.py").write_text('raise ImportError("simulated broken fastlower install")\n')
    (shadow.parent / "sitecustomize.py").write_text(
        "import importlib.machinery, sys\n"
        "sys.meta_path.insert(0, importlib.machinery.PathFinder)\n")
    return shadow.parent


def _pytest(shadow: Optional[Path], *args: str, reference: bool = False
            ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FASTLOWER_CONFORMANCE_IMPL", "FASTLOWER_DIFF_IMPL", "PYTHONPATH")}
    if shadow is not None:
        env["PYTHONPATH"] = str(shadow)
    if reference:
        env["FASTLOWER_CONFORMANCE_IMPL"] = "reference"
    # -p no:fastlower: the installed package's own pytest plugin cannot load either
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:fastlower",
                           "-p", "no:warnings", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_shadow_really_breaks_the_import(broken_fastlower):
    env = dict(os.environ, PYTHONPATH=str(broken_fastlower))
    done = subprocess.run([sys.executable, "-c", "import fastlower"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "simulated broken fastlower install" in done.stderr


def test_differential_suite_errors_out(broken_fastlower):
    done = _pytest(broken_fastlower, "--collect-only", "tests/differential/test_chained.py")
    out = done.stdout + done.stderr
    assert done.returncode not in (0, 5), out[-3000:]
    assert "simulated broken fastlower install" in out
    assert "FASTLOWER_CONFORMANCE_IMPL=reference" in out  # says how to ask for the reference


@pytest.mark.slow
def test_differential_suite_compares_the_reference_only_when_asked():
    """(Its test cases build their programs with ``fastlower.frontends.examples``: this one runs
    with fastlower importable.)"""
    done = _pytest(None, "--collect-only", "tests/differential/test_chained.py", reference=True)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "comparing the REFERENCE with itself" in out


def test_conformance_suite_errors_out(broken_fastlower):
    done = _pytest(broken_fastlower, "tests/conformance/test_reference_suite.py",
                   "-k", "test_selected_implementation_is_bound_everywhere")
    out = done.stdout + done.stderr
    assert done.returncode not in (0, 5), out[-3000:]
    assert "import fastlower` failed" in out and "simulated broken fastlower install" in out


@pytest.mark.slow
def test_conformance_suite_runs_the_reference_without_fastlower_when_asked(broken_fastlower):
    done = _pytest(broken_fastlower, "tests/conformance/test_reference_suite.py",
                   "-k", "test_selected_implementation_is_bound_everywhere", reference=True)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "1 passed" in out
