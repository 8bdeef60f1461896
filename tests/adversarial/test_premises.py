"""Each shortcut's premise broken on purpose: fastlower's default mode must still give
ExecuTorch's ``.pte`` byte for byte, or raise ExecuTorch's error.

Every case is a repeated-block program (``structures``) with weights chosen against one
premise (``weights``). Its fastlower steps run in processes of their own on one cache
folder (a step before the last fills the caches a later one may derive or refit from);
ExecuTorch's lowerings of every case's last step run in one process of their own. The
cases are the ones that once gave a different ``.pte`` or accepted what ExecuTorch
rejects: a zero bias in the samples a template was learnt from, a cached template
applied to trained biases, a weight equal to a literal of the graph (float and integer),
a user input mutated in place, a zero quantization scale in a derived member, uniform
convolution weights (their own channels-last layout).

The default run takes one case of each premise; ``SLOW`` (a second case of a premise
already in the default run) runs with ``-m slow``. ExecuTorch's lowerings are made for
the selected cases only.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from tests import python_children

ROOT = Path(__file__).resolve().parents[2]
ZERO_BIASES = [f"layers.{k}.bias:zero" for k in range(4)]


@dataclass(frozen=True)
class Case:
    structure: str
    last: Tuple[str, ...]  # the mutations of the lowering compared with ExecuTorch's
    before: Tuple[Tuple[str, ...], ...] = ()  # earlier lowerings on the same cache
    expect: Dict[str, Any] = field(default_factory=dict)  # what fastlower's report says


CASES = {
    # the representative's and probe's biases zero, block 0's trained: "stored as is"
    # explains a zero int32 bias, and must not be applied to a trained one
    "zero biases in the samples": Case("int8_linear", ("layers.1.bias:zero",
                                                      "layers.2.bias:zero"),
                                       expect={"fallback": "value case"}),
    # every bias zero: deriving is sound, and still done
    "every bias zero": Case("int8_linear", tuple(ZERO_BIASES), expect={"derived": True}),
    # a template proven on zero biases is cached; the next checkpoint has trained ones
    "cached template, then trained biases": Case("int8_linear", (), (tuple(ZERO_BIASES),),
                                                 expect={"fallback": "value case"}),
    # gate == 0.5 beside y * 0.5 in A; B moves the gate: the stored 0.5 is ambiguous
    "a gate equal to a literal": Case("literals", (), (("gate:=0.5",),),
                                      expect={"refused": "a literal"}),
    "a divisor equal to a literal": Case("literals", (), (("divisor:=3.0",),),
                                         expect={"refused": "a literal"}),
    "an integer buffer equal to a literal": Case("literals", (), (("steps:=2",),),
                                                 expect={"refused": "a literal"}),
    "a user input mutated in place": Case("mutated_input", (),
                                          expect={"retrace": "user inputs are mutated"}),
    # ExecuTorch rejects a zero scale; a derived member must not skip that check
    "a zero scale in a member": Case("int8_linear_per_channel",
                                     (*ZERO_BIASES, "_scale_0:zero_elem"),
                                     expect={"error": "Invalid quantization scale"}),
    "a zero group scale, 8da4w": Case("8da4w_linear", ("layers.0.weight.scale:zero_elem",)),
    "uniform convolution weights": Case("conv", ("layers.0.weight:uniform",
                                                 "layers.1.weight:uniform")),
    "tied weights in one block": Case("fp32_linear", ("layers.2.weight:@layers.3.weight",)),
}


# a second case of a premise the default run already breaks: run with -m slow
SLOW = {"every bias zero", "a divisor equal to a literal", "an integer buffer equal to a literal",
        "a zero group scale, 8da4w", "tied weights in one block",
        "cached template, then trained biases", "uniform convolution weights"}


def _run(jobs: List[Dict[str, Any]], path: Path, env_extra: Dict[str, str]) -> List[Dict]:
    """The jobs lowered in one new process; each outcome with its ``.pte`` bytes."""
    path.write_text(json.dumps(jobs))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOWER_")}
    env.update(PYTHONPATH=str(ROOT), **env_extra)
    done = python_children.run([sys.executable, "-m", "tests.adversarial.run", "batch", str(path)],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    outcomes = json.loads(path.with_name(path.name + ".out").read_text())
    for k, outcome in enumerate(outcomes):
        pte = path.with_name(f"{path.name}.{k}.pte")
        outcome["pte"] = pte.read_bytes() if pte.exists() else None
    return outcomes


@pytest.fixture(scope="module")
def references(request, tmp_path_factory) -> Dict[str, Dict]:
    """ExecuTorch's outcome of the last lowering of every case this session runs, in one
    process of its own."""
    folder = tmp_path_factory.mktemp("references")
    selected = {item.callspec.params["name"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    names = [n for n in CASES if n in selected]
    jobs = [{"impl": "reference", "structure": CASES[n].structure,
             "mutations": list(CASES[n].last)} for n in names]
    return dict(zip(names, _run(jobs, folder / "jobs.json", {})))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in CASES])
def test_default_mode_gives_executorchs_result(name, references, tmp_path):
    case = CASES[name]
    cache = tmp_path / "cache"
    for k, mutations in enumerate(case.before):  # each in a process of its own
        _run([{"impl": "fastlower", "structure": case.structure, "mutations": list(mutations),
               "cache": str(cache)}], tmp_path / f"before{k}.json", {})
    got = _run([{"impl": "fastlower", "structure": case.structure,
                 "mutations": list(case.last), "cache": str(cache)}], tmp_path / "last.json",
               {})[0]
    expected = references[name]
    assert got["error"] == expected["error"]
    assert got["pte"] == expected["pte"], f"{name}: the .pte differs from ExecuTorch's"
    _check_report(case, got)


def _check_report(case: Case, got: Dict[str, Any]) -> None:
    """The shortcut the case breaks was declined (and the report says why), or taken
    where it is sound."""
    classes = got["classes"] or {}
    if "fallback" in case.expect:
        whys = [f["why"] for f in classes.get("fallbacks", [])]
        assert any(case.expect["fallback"] in why for why in whys), classes
    if case.expect.get("derived"):
        assert classes.get("derived", 0) > 0, classes
    if "refused" in case.expect:
        assert got["cache"] == "miss", got["cache"]
        assert case.expect["refused"] in got["refit"], got["refit"]
    if "retrace" in case.expect:
        reasons = (got["retraces"] or {}).get("reasons", [])
        assert any(case.expect["retrace"] in why for why in reasons), got["retraces"]
    if "error" in case.expect:
        assert case.expect["error"] in got["error"], got["error"]
