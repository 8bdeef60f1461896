"""The differential oracle: lower one fuzz case with the reference and with
fastlower, and classify what happened.

A case is fully determined by an integer seed (:func:`draw_case`): the program
recipe comes from ``seed // CASES_PER_PROGRAM`` (so several partitioner cases
share one export, which is what costs most), the partitioner(s), the overload
and the shape of the call from ``seed`` itself.

Each implementation lowers its own independent copy of the program (the
reference mutates its input).  Outcomes (:class:`Outcome`):

* ``MATCH`` / ``MATCH_REFERENCE_MUTATED_INPUT``: both succeed with identical
  results (structure, every delegate, the ``.pte`` bytes, runtime numerics where
  XNNPACK can run); in the second the reference also changed its input program,
  which fastlower deliberately never does (docs/differences.md, "Where fastlower deliberately
  differs").
* ``SAME_ERROR``: both raise; fastlower's error is an instance of the
  reference's class and contains the reference's message.
* ``SAME_ERROR_CLASS``: both raise an error of the reference's class, but
  fastlower's message is its own (e.g. the reference crashes inside torch.fx
  with a ``RuntimeError`` where fastlower names the broken rule).
* ``DELIBERATE_LIST_ARG_CONSTANT``: the reference crashes on a constant shared
  through a list argument (pytorch/executorch#22798); fastlower lowers it and
  its result computes what the eager model computes.
* ``KNOWN_DEFECT``: a discrepancy matching one of the open fastlower defects
  listed in :data:`KNOWN_OPEN_DEFECTS`.  Remove an entry once its fix is merged:
  the cases it covered then must match.
* ``MISMATCH``: anything else; the test fails and prints the replay command.

In every case fastlower must leave the caller's program unchanged (graph code,
signature, every tensor's data).
"""

from __future__ import annotations

import enum
import random
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from executorch.exir import EdgeProgramManager
from executorch.exir.backend.backend_api import MethodProgramsPartitionerSpec
from executorch.exir.lowered_backend_module import get_lowered_submodules

from tests.differential import harness as H

from .partitioners import FuzzPartitioner, PartitionerRecipe, SCALAR_EDITS, draw_partitioner_recipe
from .programs import BuiltProgram, ProgramRecipe, build_program, draw_recipe

CASES_PER_PROGRAM = 4
PATHS = ("direct", "spec", "manager")

# Open fastlower defects (lead engineer fixing on main).  Remove a letter when
# its fix is merged: the discrepancies it excused then fail the fuzz.
KNOWN_OPEN_DEFECTS: Dict[str, str] = {
    # fixed on main and removed: a (chained lowering names), b (partitioner edits),
    # c (missing method's class), d (two rules' order), e (storage safety),
    # f1 (cond partition without its branches), f2 (users order after the owning
    # program's adjustment), f4 (stray output tag)
}


class Outcome(enum.Enum):
    MATCH = "both succeed, identical"
    MATCH_REFERENCE_MUTATED_INPUT = "both succeed, identical; the reference changed its input"
    SAME_ERROR = "both raise the same class, fastlower's message contains the reference's"
    SAME_ERROR_CLASS = "both raise the same class, the messages differ"
    DELIBERATE_LIST_ARG_CONSTANT = "reference crashes on a list-argument constant (#22798)"
    KNOWN_DEFECT = "known open fastlower defect"
    MISMATCH = "discrepancy"


# run totals, printed by tests/fuzz/conftest.py; keyed by case seed so that
# hypothesis re-running a failing example does not count it twice
RESULTS: Dict[int, "Verdict"] = {}
CHECKS: Counter = Counter()  # how many cases reached each deeper check


def outcome_counts() -> Counter:
    return Counter(v.outcome for v in RESULTS.values())


def defect_counts() -> Counter:
    return Counter(v.defect for v in RESULTS.values() if v.defect)


@dataclass
class Case:
    seed: int
    program_seed: int
    stages: List[PartitionerRecipe]  # one, or two for a chained lowering
    path: str
    missing_method: bool = False

    def describe(self, recipe: ProgramRecipe) -> str:
        lines = [f"case seed {self.seed} (program seed {self.program_seed}), path={self.path}, "
                 f"missing_method={self.missing_method}, {len(self.stages)} stage(s)"]
        lines += [f"  P{i + 1}: {s.describe()} (partitioner seed {s.seed})"
                  for i, s in enumerate(self.stages)]
        return "\n".join(lines + ["  program:", recipe.describe()])


@dataclass
class Verdict:
    outcome: Outcome
    detail: str = ""
    defect: Optional[str] = None


def program_seed_of(case_seed: int) -> int:
    return case_seed // CASES_PER_PROGRAM


def draw_case(case_seed: int) -> Case:
    rng = random.Random(case_seed)
    stages = [draw_partitioner_recipe(rng)]
    if rng.random() < 0.2:  # chained lowering: P1, then P2 on the result
        stages.append(draw_partitioner_recipe(rng))
    missing = rng.random() < 0.04
    path = rng.choice(("spec", "manager") if missing else PATHS)
    return Case(case_seed, program_seed_of(case_seed), stages, path, missing)


def build_case_program(program_seed: int) -> BuiltProgram:
    return build_program(draw_recipe(random.Random(program_seed)), program_seed)


# --------------------------------------------------------------------------- lowering
@dataclass
class Run:
    """One implementation's run of a case."""

    result: Optional[EdgeProgramManager] = None
    error: Optional[BaseException] = None
    stage_inputs: List[Tuple[Dict[str, Any], Dict[str, Any]]] = field(default_factory=list)
    input_changed: List[str] = field(default_factory=list)  # what changed in its inputs
    edits: List[str] = field(default_factory=list)
    delegates_before_stage2: bool = False


def _lower_stage(impl: Callable, epm: EdgeProgramManager, partitioner, case: Case):
    arg = {"forward": partitioner, "nosuch": partitioner} if case.missing_method else partitioner
    if case.path == "direct":
        progs = {name: impl(ep, arg) for name, ep in epm._edge_programs.items()}
        return H._wrap(epm, progs)
    if case.path == "spec":
        parts = arg if isinstance(arg, dict) else {n: arg for n in epm._edge_programs}
        return H._wrap(epm, impl(MethodProgramsPartitionerSpec(dict(epm._edge_programs), parts)))
    with H.manager_context(impl):
        return epm.to_backend(arg)


def _count_delegates(epm: EdgeProgramManager) -> int:
    total = 0
    for ep in epm._edge_programs.values():
        for _, gm in H._walk_graph_modules(ep.graph_module, "gm"):
            total += len(get_lowered_submodules(gm))
    return total


def run_impl(impl: Callable, epm: EdgeProgramManager, case: Case) -> Run:
    run = Run()
    current = epm
    try:
        for k, recipe in enumerate(case.stages):
            if k == 1:
                run.delegates_before_stage2 = _count_delegates(current) > 0
            before = {n: H.input_state(ep) for n, ep in current._edge_programs.items()}
            programs = dict(current._edge_programs)
            partitioner = FuzzPartitioner(recipe, prefix=f"s{k}t")
            try:
                current = _lower_stage(impl, current, partitioner, case)
            finally:
                run.edits += partitioner.edited
                for name, state in before.items():
                    if state != H.input_state(programs[name]):
                        run.input_changed.append(f"stage {k + 1} input program {name!r}")
        run.result = current
    except Exception as e:  # noqa: BLE001 - the error is the outcome
        run.error = e
    return run


# --------------------------------------------------------------------------- classification
def _wrong_delegate_names(epm: EdgeProgramManager) -> List[str]:
    """get_attr nodes of delegates whose target is not their name, or shared targets (defect a)."""
    bad = []
    for ep in epm._edge_programs.values():
        for where, gm in H._walk_graph_modules(ep.graph_module, "gm"):
            seen = set()
            for node in gm.graph.nodes:
                if node.op == "get_attr" and str(node.target).startswith("lowered_module_"):
                    if node.target != node.name or node.target in seen:
                        bad.append(f"{where}:{node.name}->{node.target}")
                    seen.add(node.target)
    return bad


def _list_arg_constant_error(message: str, program) -> bool:
    """The reference's #22798 crash: a constant tagged for one partition, used through a
    list argument by another."""
    if "constant data node (" not in message:
        return False
    name = message.split("constant data node (", 1)[1].split(")", 1)[0]
    node = next((n for n in program.graph.nodes if n.name == name), None)
    if node is None:
        return False
    for user in node.users:
        for arg in list(user.args) + list(user.kwargs.values()):
            if isinstance(arg, (list, tuple)) and node in arg:
                return True
    return False


def _known(letter: str, detail: str) -> Optional[Verdict]:
    if letter in KNOWN_OPEN_DEFECTS:
        return Verdict(Outcome.KNOWN_DEFECT, detail, letter)
    return None


def _defect_for_difference(case: Case, ref: Run, got: Run, detail: str) -> Verdict:
    """A discrepancy: one of the known open defects, or a MISMATCH."""
    candidates = []
    if any(s.tag_hop_nodes for s in case.stages) and ref.error is not None \
            and "is missing val field" in str(ref.error):
        candidates.append("f1")
    diff_lines = [ln for ln in detail.splitlines() if ln.startswith("[")]
    if detail.startswith("lowering differs") and diff_lines and all(
            "] users differs" in ln for ln in diff_lines):
        candidates.append("f2")
    if detail.startswith("lowering differs") and diff_lines and all(
            "] meta keys differs" in ln for ln in diff_lines) and "'delegation_tag']" in detail:
        candidates.append("f4")
    if any(s.backend_mix == ("mutating",) for s in case.stages):
        candidates.append("e")
    if got.edits and any(s.edit in SCALAR_EDITS for s in case.stages):
        candidates.append("b")
    if len(case.stages) == 2 and (got.delegates_before_stage2 or (
            got.result is not None and _wrong_delegate_names(got.result))):
        candidates.append("a")
    if case.missing_method and got.error is not None and ref.error is not None \
            and "partitioner-without-program" in str(got.error) \
            and isinstance(ref.error, AssertionError):
        candidates.append("c")
    if got.error is not None and type(got.error).__name__ == "OwnedBufferUpdateReadError" \
            and isinstance(ref.error, AssertionError):
        candidates.append("d")
    # the most specific signatures first
    for letter in sorted(candidates, key=["c", "d", "f1", "f2", "f4", "a", "e", "b"].index):
        verdict = _known(letter, detail)
        if verdict is not None:
            return verdict
    return Verdict(Outcome.MISMATCH, detail)


def _all_xnnpack(epm: EdgeProgramManager) -> bool:
    ids = []
    for ep in epm._edge_programs.values():
        for _, gm in H._walk_graph_modules(ep.graph_module, "gm"):
            ids += [lm.backend_id for _, lm, _ in get_lowered_submodules(gm)]
    return bool(ids) and all(i == "XnnpackBackend" for i in ids)


def _eager_matches(epm: EdgeProgramManager, built: BuiltProgram) -> Optional[str]:
    try:
        out = epm.exported_program("forward").module()(*[t.clone() for t in built.inputs])
        out = out if isinstance(out, (tuple, list)) else (out,)
        H.assert_close_outputs(built.expected, out, "eager lowered")
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def classify(case: Case, built: BuiltProgram, ref: Run, got: Run,
             check_pte: bool = True) -> Verdict:
    """Compare the two runs of ``case``."""
    if got.input_changed:
        return _defect_for_difference(
            case, ref, got,
            "fastlower changed the caller's program: " + "; ".join(got.input_changed))
    ref_mutated = bool(ref.input_changed)
    if ref.error is not None and got.error is not None:
        rmsg = H.normalize_message(str(ref.error))
        gmsg = H.normalize_message(str(got.error))
        if isinstance(got.error, type(ref.error)):
            if rmsg == gmsg:
                return Verdict(Outcome.SAME_ERROR, f"{type(ref.error).__name__}")
            return Verdict(Outcome.SAME_ERROR_CLASS, f"reference {rmsg[:200]!r}; fastlower "
                                                     f"{type(got.error).__name__}: {gmsg[:200]!r}")
        return _defect_for_difference(
            case, ref, got, f"errors differ: reference {type(ref.error).__name__}: {rmsg[:300]!r}; "
                            f"fastlower {type(got.error).__name__}: {gmsg[:300]!r}")
    if ref.error is not None:
        program = built.epm.exported_program("forward")
        if (len(case.stages) == 1 and type(ref.error) is RuntimeError
                and _list_arg_constant_error(str(ref.error), program)):
            wrong = _eager_matches(got.result, built)
            CHECKS["eager numerics of a #22798 case"] += 1
            if wrong is None:
                return Verdict(Outcome.DELIBERATE_LIST_ARG_CONSTANT, str(ref.error)[:120])
            return Verdict(Outcome.MISMATCH, f"list-argument constant lowered wrongly: {wrong}")
        return _defect_for_difference(
            case, ref, got, f"reference raised {type(ref.error).__name__}: "
                            f"{H.normalize_message(str(ref.error))[:300]!r}; fastlower succeeded")
    if got.error is not None:
        return _defect_for_difference(
            case, ref, got, f"fastlower raised {type(got.error).__name__}: "
                            f"{H.normalize_message(str(got.error))[:300]!r}; reference succeeded")
    try:
        H.assert_same_lowering(ref.result, got.result, check_inputs=False)
    except AssertionError as e:
        return _defect_for_difference(case, ref, got, str(e)[:3000])
    if check_pte:
        verdict = _compare_executorch(case, built, ref, got)
        if verdict is not None:
            return verdict
    if ref_mutated:
        return Verdict(Outcome.MATCH_REFERENCE_MUTATED_INPUT, "; ".join(ref.input_changed))
    return Verdict(Outcome.MATCH)


def _compare_executorch(case, built, ref: Run, got: Run) -> Optional[Verdict]:
    runnable = _all_xnnpack(got.result)
    outs = []
    for run in (ref, got):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outs.append(run.result.to_executorch())
        except Exception as e:  # noqa: BLE001
            outs.append(e)
    r, g = outs
    if isinstance(r, Exception) or isinstance(g, Exception):
        if isinstance(r, Exception) and isinstance(g, type(r)):
            return None  # both fail in to_executorch alike: the lowering results were identical
        return _defect_for_difference(case, ref, got, f"to_executorch: reference {r!r:.300}; "
                                                      f"fastlower {g!r:.300}")
    try:
        H.assert_same_executorch(r, g)
    except AssertionError as e:
        return _defect_for_difference(case, ref, got, str(e)[:2000])
    CHECKS["identical .pte bytes"] += 1
    if runnable:
        CHECKS["runtime run of XNNPACK-only .pte"] += 1
        try:
            outs = _run_in_child(lambda: [H.run_in_runtime(p, [t.clone() for t in built.inputs])
                                          for p in (r, g)])
        except RuntimeCrashed as e:
            # the bytes are identical (checked above): the runtime's own crash, on both
            CHECKS[f"runtime crashed on the identical .pte ({e}; ExecuTorch's own)"] += 1
            CRASHED_RUNTIME_SEEDS.append(case.seed)
            return None
        except Exception as e:  # noqa: BLE001
            # likewise: the runtime rejects the reference's own, identical, .pte
            CHECKS[f"runtime rejected the identical .pte ({str(e)[:60]}; ExecuTorch's own)"] += 1
            CRASHED_RUNTIME_SEEDS.append(case.seed)
            return None
        ref_out, got_out = outs
        try:
            H.assert_close_outputs(ref_out, got_out, "runtime fastlower vs reference", 0, 0)
        except AssertionError as e:
            return Verdict(Outcome.MISMATCH, str(e))
        try:
            H.assert_close_outputs(built.expected, got_out, "runtime vs eager")
        except AssertionError:
            # identical .pte bytes: the backend's own numerics (e.g. XNNPACK ignores add's
            # alpha, which its own partitioner never hands it), not a lowering difference
            CHECKS["XNNPACK .pte != eager for both implementations (backend's own)"] += 1
    return None


class RuntimeCrashed(Exception):
    """The child running a .pte died (a signal: ExecuTorch's runtime crashed)."""


CRASHED_RUNTIME_SEEDS: List[int] = []


def _run_in_child(work: Callable[[], Any]) -> Any:
    """``work()`` in a forked child: a runtime that crashes on a program (it has segfaulted
    on some XNNPACK programs) ends that child, not the whole fuzz run."""
    import multiprocessing
    import pickle

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child() -> None:
        # plain pickle: multiprocessing's own would share tensors through files that
        # vanish with the child
        try:
            send.send_bytes(pickle.dumps(("ok", work())))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            send.send_bytes(pickle.dumps(("error", f"{type(e).__name__}: {e}")))

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    send.close()
    try:
        status, value = pickle.loads(receive.recv_bytes())
    except EOFError:  # the child died without answering
        proc.join(timeout=30)
        raise RuntimeCrashed(f"exit code {proc.exitcode}") from None
    finally:
        receive.close()
    proc.join(timeout=30)
    if status == "error":
        raise RuntimeError(value)
    return value


def run_case(case_seed: int, built: Optional[BuiltProgram] = None,
             check_pte: bool = True) -> Tuple[Case, Verdict, BuiltProgram]:
    """Draw, lower with both implementations and classify one case; counts the outcome."""
    import fastlower

    case = draw_case(case_seed)
    if built is None:
        built = build_case_program(case.program_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = run_impl(H.REFERENCE, built.fresh(), case)
        got = run_impl(fastlower.to_backend, built.fresh(), case)
    verdict = classify(case, built, ref, got, check_pte)
    RESULTS[case_seed] = verdict
    return case, verdict, built
