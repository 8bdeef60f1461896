"""The Python schema (``fastlower.core.schema``) and the C++ core's headers cannot drift.

Reads the sources in ``csrc/`` (not the built extension), so it runs without a build:
every constant of ``csrc/schema.hpp`` has the same value in ``_schema`` and the other
way round; the fields of ``GraphInput`` / ``PartitionData`` (``csrc/fusion.hpp``) are
those of ``GraphArrays`` / ``PartitionPlan``, those of ``PlanOptionsData`` /
``RuleStopData`` (``csrc/plan.hpp``) those of ``PlanOptions`` / ``RuleStop``; and the
binding interface version in ``_core_loader.py`` is the one ``csrc/bind_info.cpp`` builds.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fastlower.core import loader as _core_loader, schema as _schema
from fastlower.core.twin import checks as twin_checks
from fastlower.core.twin import contract as twin_contract
from fastlower.core.twin import fusion as twin_fusion

CSRC = Path(__file__).resolve().parents[1] / "csrc"

_CONSTANT = re.compile(
    r"^\s*inline\s+constexpr\s+u?int(?:8|16|32|64)_t\s+([A-Z][A-Z0-9_]*)\s*=\s*(-?\d+)\s*;",
    re.MULTILINE)


def _read(name: str) -> str:
    path = CSRC / name
    if not path.exists():
        pytest.skip(f"{path} is not here (an installed copy without the sources)")
    return path.read_text()


def header_constants(text: str) -> dict[str, int]:
    """``NAME -> value`` of every ``inline constexpr <int type> NAME = <literal>;``."""
    found: dict[str, int] = {}
    for name, value in _CONSTANT.findall(text):
        assert name not in found, f"{name} defined twice"
        found[name] = int(value)
    return found


def struct_fields(text: str, struct: str) -> list[str]:
    """Data member names of ``struct <struct> { ... };`` in declaration order."""
    m = re.search(r"struct\s+" + struct + r"\s*\{(.*?)\n\};", text, re.DOTALL)
    assert m, f"struct {struct} not found"
    names: list[str] = []
    for line in m.group(1).splitlines():
        line = line.split("//")[0].strip()
        if not line.endswith(";") or "(" in line:
            continue
        decl = re.sub(r"\s*=[^,;]*", "", line[:-1])  # drop initialisers
        decl = re.sub(r"<[^;]*>", "<>", decl)  # template arguments hold commas
        first, *rest = decl.split(",")
        names.append(first.split()[-1])
        names.extend(r.strip() for r in rest)
    return names


def test_header_constants_equal_schema():
    header = header_constants(_read("schema.hpp"))
    assert len(header) >= 25, "the parser found too few constants in csrc/schema.hpp"
    python = {name: getattr(_schema, name) for name in _schema.__all__
              if isinstance(getattr(_schema, name), int)}
    assert header == python


def test_no_other_header_redefines_a_shared_constant():
    # a second definition (an old enum left behind) would shadow or contradict schema.hpp
    shared = set(header_constants(_read("schema.hpp")))
    for path in sorted(CSRC.glob("*.[ch]pp")):
        if path.name == "schema.hpp":
            continue
        for name in shared:
            assert not re.search(r"\b" + name + r"\s*=", path.read_text()), (
                f"{path.name} defines {name}; only csrc/schema.hpp may")


def test_core_structs_have_the_schema_fields():
    fusion = _read("fusion.hpp")
    graph = [f.name for f in dataclasses.fields(_schema.GraphArrays)]
    assert struct_fields(fusion, "GraphInput") == graph
    # `owned` is never filled, by either side
    plan = [f.name for f in dataclasses.fields(_schema.PartitionPlan) if f.name != "owned"]
    assert struct_fields(fusion, "PartitionData") == plan


def test_plan_structs_have_the_schema_fields():
    plan = _read("plan.hpp")
    # taken_lowered goes to the simulator (FusionCore) when the binding makes it
    options = [f.name for f in dataclasses.fields(_schema.PlanOptions) if f.name != "taken_lowered"]
    assert struct_fields(plan, "PlanOptionsData") == options
    stop = [f.name for f in dataclasses.fields(_schema.RuleStop)]
    assert struct_fields(plan, "RuleStopData") == stop


def test_binding_interface_version():
    m = re.search(r"#define\s+FASTLOWER_CORE_INTERFACE\s+(\d+)", _read("bind_info.cpp"))
    assert m, "FASTLOWER_CORE_INTERFACE not found in csrc/bind_info.cpp"
    assert int(m.group(1)) == _core_loader.CORE_INTERFACE


def test_core_stub_names_the_interface():
    stub = (Path(_schema.__file__).parent.parent / "_core.pyi").read_text()
    assert f"interface {_core_loader.CORE_INTERFACE}." in stub.splitlines()[0]


def test_old_import_paths_are_the_schema():
    assert twin_fusion.GraphArrays is _schema.GraphArrays
    assert twin_fusion.PartitionPlan is _schema.PartitionPlan
    assert twin_fusion.OP_OUTPUT == _schema.OP_OUTPUT
    assert twin_checks.MAX_TAGS == _schema.MAX_TAGS
    assert twin_contract.OWNABLE_ROLES == _schema.OWNABLE_ROLES
    assert (twin_contract.OK, twin_contract.TAGGED_OUTPUT, twin_contract.TAGGED_USER_INPUT,
            twin_contract.UNKNOWN_TAG, twin_contract.NO_COPY_SHARED) == (
        _schema.CONTRACT_OK, _schema.CONTRACT_TAGGED_OUTPUT, _schema.CONTRACT_TAGGED_USER_INPUT,
        _schema.CONTRACT_UNKNOWN_TAG, _schema.CONTRACT_NO_COPY_SHARED)


def test_built_core_agrees():
    """The built extension behaves by the schema's codes (skipped without a build)."""
    core = pytest.importorskip("fastlower._core")
    s = _schema
    # a tagged output node: (CONTRACT_TAGGED_OUTPUT, node 0, -1)
    got = core.find_contract_violation([s.OP_OUTPUT], [0], [s.ROLE_OTHER], [0], [0, 0], [], False)
    assert tuple(got) == (s.CONTRACT_TAGGED_OUTPUT, 0, -1)
    got = core.find_contract_violation([s.OP_CALL_FUNCTION], [s.TAG_UNKNOWN], [s.ROLE_OTHER], [0],
                                       [0, 0], [], True)
    assert tuple(got) == (s.CONTRACT_UNKNOWN_TAG, 0, -1)
    assert core.INTERFACE == _core_loader.CORE_INTERFACE
    with pytest.raises(ValueError):
        core.group_by_tag([], s.MAX_TAGS + 1)
    assert len(core.group_by_tag([], s.MAX_TAGS)) == s.MAX_TAGS


@pytest.mark.slow  # mypy's stubtest, half a minute; CI's mypy step checks the stub's users
def test_core_stub_matches_the_extension():
    """``_core.pyi`` names every function, class, method and property of the built
    extension, with its parameters (mypy's stubtest; skipped without a build)."""
    pytest.importorskip("fastlower._core")
    pytest.importorskip("mypy.stubtest")
    allowlist = Path(__file__).parent / "stubtest" / "core_allowlist.txt"
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "fastlower._core", "--allowlist", str(allowlist)],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
