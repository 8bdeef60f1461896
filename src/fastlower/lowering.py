"""Orchestration: partition, check, encode, plan, preprocess, apply."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional

import torch
from executorch.exir.backend.partitioner import Partitioner, PartitionResult
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.export.exported_program import (
    ExportGraphSignature, InputKind, InputSpec, OutputSpec, TensorArgument,
)

from . import errors, state
from ._schema import OP_PLACEHOLDER
from .apply import GraphBuilder, Partition, SignatureIndex
from .backends import copy_for_backend, find_backend, make_lowered_module
from .edits import PartitionerEdits, find_edits
from .encode import Interner, encode_graph, structure_difference, taken_lowered_indices
from .partitioners import accelerated as native_partitioners
from .programs import lazy_module_copy, unvalidated_program
from .plan import (
    INSERT, PROGRAM, GraphPlan, PlanStop, iter_partitions, plan_program,
)
from .preprocess.jobs import PreprocessJob, overrides_preprocess_multimethod
from .preprocess.run import preprocess_partitions
from .report import LoweringReport

log = logging.getLogger(__name__)


def make_fake_program(program: ExportedProgram) -> ExportedProgram:
    """A copy for the partitioner: own graph, fake parameters, no copy of constant storage."""
    fake_mode = detect_fake_mode(tuple(n.meta.get("val") for n in program.graph.nodes
                                       if n.op == "placeholder"))
    if fake_mode is None:
        log.warning("no fake mode found in the graph; the partitioner gets a deep copy")
        return copy.deepcopy(program)
    fake_state = {k: fake_mode.from_tensor(v, static_shapes=True)
                  for k, v in program.state_dict.items()}
    gm = lazy_module_copy(program.graph_module)
    # the input was validated by the caller (``lower_program``/``lower_methods``)
    return unvalidated_program(
        lazy=True, root=gm, graph=gm.graph, graph_signature=copy.deepcopy(program.graph_signature),
        state_dict=fake_state, range_constraints=copy.deepcopy(program.range_constraints),
        module_call_graph=copy.deepcopy(program.module_call_graph),
        constants=_constants_for_partitioner(program.constants), verifiers=[program.verifier],
    )


def _constants_for_partitioner(constants: Mapping[str, object]) -> Dict[str, object]:
    """The program's constants, real values the partitioner cannot write through.

    The reference hands the partitioner the caller's own constant tensors (only
    parameters and buffers become fake), so a partitioner that writes one in place
    changes the caller's program. fastlower gives it copies (lifted constants are
    small next to the weights, which stay fake); scripts and other objects are
    passed as they are.
    """
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in constants.items()}


def check_unmodified(tagged: ExportedProgram, original: ExportedProgram, partitioner) -> None:
    """The partitioner may tag nodes but not change the graph's structure."""
    diff = structure_difference(tagged.graph_module, original.graph_module)
    if diff >= 0:
        nodes = list(tagged.graph_module.graph.nodes)
        orig = list(original.graph_module.graph.nodes)
        if diff < min(len(nodes), len(orig)):
            detail = (f"node #{diff} is {nodes[diff].format_node()} but the input program has "
                      f"{orig[diff].format_node()}")
            raise errors.GraphModifiedError(str(partitioner), detail, nodes[diff].name)
        raise errors.GraphModifiedError(
            str(partitioner), f"the graph has {len(nodes)} nodes, the input program {len(orig)}")


@dataclass
class MethodLowering:
    """One method's lowering in progress."""

    name: str
    original: ExportedProgram
    tagged: ExportedProgram
    result: PartitionResult
    tag_names: List[str]
    plan: GraphPlan
    edits: PartitionerEdits  # what the partitioner changed besides tags
    builders: List[GraphBuilder] = field(default_factory=list)  # top first, then nested
    partitions: List[Partition] = field(default_factory=list)
    input_specs: List[InputSpec] = field(default_factory=list)  # after constant duplication
    # the first error in the reference's order of work, raised once every partition
    # before it has gone as far as the reference takes it (see plan.PlanStop)
    stop: Optional[PlanStop] = None

    def raise_stop(self) -> None:
        if self.stop is not None:
            raise self.stop.error


def _partition(name: str, program: ExportedProgram, partitioner: Partitioner,
               single: bool, report: LoweringReport) -> MethodLowering:
    fake = make_fake_program(program)
    # canonical partitioners propose natively (FASTLOWER_NATIVE_PARTITIONERS=0: off)
    with report.external_time("partitioner"), native_partitioners():
        result = partitioner(fake)
    tagged = result.tagged_exported_program
    validating = state.validation_enabled()
    if validating:
        check_unmodified(tagged, program, partitioner)
    else:
        log.warning("Disabled validating the partitioner.")
    edits = find_edits(tagged.graph_module, program.graph_module, structure_checked=validating)
    if edits:
        _report_edits(edits, partitioner, strict=validating and state.strict_partitioners_enabled())
    if result.partition_tags is None:
        raise errors.MissingPartitionTagsError(str(partitioner))
    tag_names = list(result.partition_tags.keys())
    tag_index = {t: i for i, t in enumerate(tag_names)}
    encoded = encode_graph(tagged.graph_module, tag_index, tagged, Interner())
    # the reference's owning module is a deep copy of the whole input module: its
    # attributes, used or not, are taken names too
    encoded.taken_lowered = taken_lowered_indices(tagged.graph_module, program.graph_module)
    # an invalid edit anywhere fails where the reference's constant duplication
    # validates the whole tagged program
    plan = plan_program(encoded, tag_names, single, state.strict_tags_enabled(),
                        validate_tagged=tagged._validate if edits else None)
    lowering = MethodLowering(name, program, tagged, result, tag_names, plan, edits,
                              stop=plan.stop)
    _collect_builders(lowering, plan)
    return lowering


def _report_edits(edits: PartitionerEdits, partitioner, strict: bool) -> None:
    """Refuse the partitioner's edits (strict) or name each of them once."""
    if strict and edits.args:
        raise errors.PartitionerEditError(str(partitioner), edits.args)
    if edits.args:
        log.warning("partitioner %s changed node arguments; the edited graph is lowered (as the "
                    "reference does) and its partitions are verified: %s", partitioner,
                    "; ".join(str(e) for e in edits.args))
    if edits.bodies or edits.unknown:
        log.warning("partitioner %s changed the structure of %s; every partition there is "
                    "verified", partitioner,
                    "the graph" if edits.unknown else f"{len(edits.bodies)} control-flow bodies")


def _collect_builders(lowering: MethodLowering, plan: GraphPlan) -> None:
    lowering.builders.append(GraphBuilder(plan, lowering.tag_names))
    for _, _, sub in plan.nested:
        _collect_builders(lowering, sub)


def _partitions_before_stop(builder: GraphBuilder, stop: Optional[PlanStop]) -> int:
    """How many of ``builder``'s partitions the reference builds before the stop."""
    if stop is None or stop.graph is not builder.plan:
        return len(builder.sim.partitions)
    return stop.pid + 1 if stop.stage == INSERT else stop.pid


def _build_partitions(lowering: MethodLowering, single: bool) -> None:
    """Each partition's program, in the reference's order, up to the lowering's stop.

    A partition program the verifier rejects becomes the stop (the reference
    rejects it building that program, before any later partition is fused).
    """
    real_state, real_constants = lowering.original.state_dict, lowering.original.constants
    lowering.input_specs = _input_specs_after_duplication(lowering)
    sig = SignatureIndex(ExportGraphSignature(
        input_specs=lowering.input_specs,
        output_specs=list(lowering.tagged.graph_signature.output_specs)))
    for builder in lowering.builders:
        for pid in range(_partitions_before_stop(builder, lowering.stop)):
            part = builder.build_partition(pid, lowering.tagged, sig, real_state, real_constants,
                                           single)
            if (lowering.edits and lowering.edits.touches(builder.enc.graph_module,
                                                          builder.original_members(pid))) \
                    or builder.has_input_without_value(pid):
                # what the input's verifier run did not cover (an edit the reference's
                # check does not see, a placeholder without a value): the partition
                # program's verifier run is where the reference rejects it
                try:
                    part.program._validate()
                except Exception as exc:  # the verifier's own error is the error
                    lowering.stop = PlanStop(exc, PROGRAM, builder.plan, pid)
                    return
            lowering.partitions.append(part)
        if lowering.stop is not None and lowering.stop.graph is builder.plan:
            return


def _input_specs_after_duplication(lowering: MethodLowering) -> List[InputSpec]:
    """The input specs with each constant copy's spec right before its original's."""
    top = lowering.builders[0]
    sim = top.sim
    copies_of: Dict[int, List[int]] = {}
    for k in sim.copies:
        copies_of.setdefault(sim.origin[k], []).append(k)
    index_by_name = {n.name: i for i, n in enumerate(top.enc.nodes) if n.op == "placeholder"}
    specs: List[InputSpec] = []
    for spec in lowering.tagged.graph_signature.input_specs:
        c = index_by_name.get(getattr(spec.arg, "name", None), -1)
        for k in copies_of.get(c, ()):
            specs.append(InputSpec(kind=spec.kind, arg=TensorArgument(name=sim.copy_target[k]),
                                   target=spec.target, persistent=spec.persistent))
        specs.append(spec)
    return specs


def _spec(lowering: MethodLowering, part: Partition):
    return lowering.result.partition_tags[part.tag]


def _lower_single(lowering: MethodLowering, report: LoweringReport) -> None:
    # --- parallel / cached preprocess (fastlower.preprocess) ---
    jobs = []
    for part in lowering.partitions:
        spec = _spec(lowering, part)
        try:
            backend = find_backend(spec.backend_id)
        except errors.BackendNotFoundError as exc:
            # met when the reference reaches this partition's preprocess
            lowering.stop = PlanStop(exc, PROGRAM, part.builder.plan, part.pid)
            break
        jobs.append(PreprocessJob(len(jobs), spec.backend_id, backend, part.program,
                                  spec.compile_specs, part.tag, lowering.name,
                                  backend_copy_hook=False, partition=part))
    with report.external_time("backend"):
        # of the partitions before the stop, an earlier one's preprocess error comes first
        results = preprocess_partitions(jobs, report)
    lowering.raise_stop()
    for job, result in zip(jobs, results):
        job.partition.lowered = make_lowered_module(job.program, job.backend_id, result,
                                                    job.compile_specs)


def _lower_multi(lowerings: List[MethodLowering], report: LoweringReport) -> None:
    """Group every method's partitions by backend; one ``preprocess_multimethod`` per backend.

    As the reference: backends in the order first seen (methods in order, tags
    in order), each method's partitions of a backend in graph order.
    """
    by_backend: Dict[str, Dict[str, List[Partition]]] = {}
    for lowering in lowerings:
        for part in lowering.partitions:  # per graph (top, nested), in tag order
            by_backend.setdefault(_spec(lowering, part).backend_id, {})
        by_key = {(id(p.builder.plan), p.pid): p for p in lowering.partitions}
        for graph, pid in iter_partitions(lowering.plan):
            part = by_key[(id(graph), pid)]
            backend_id = _spec(lowering, part).backend_id
            by_backend[backend_id].setdefault(lowering.name, []).append(part)
    specs_of = {lowering.name: lowering.result.partition_tags for lowering in lowerings}
    # an owned buffer update read outside its delegate: the reference meets it inserting
    # that delegate, after its backend's preprocess and before the next backend's
    insert_error, last_backend = None, None
    for lowering in lowerings:
        stop = lowering.plan.after_preprocess
        if stop is not None:
            insert_error = stop.error
            last_backend = _spec(lowering, next(
                p for p in lowering.partitions
                if p.builder.plan is stop.graph and p.pid == stop.pid)).backend_id
            break
    if last_backend is not None:
        backends = list(by_backend)
        by_backend = {b: by_backend[b] for b in backends[:backends.index(last_backend) + 1]}
    # --- parallel / cached preprocess (fastlower.preprocess): consecutive backends that
    # keep the default preprocess_multimethod (preprocess per partition) become one batch
    # of jobs; an override is called once per backend, in the reference's order, after
    # the batch before it (so the first backend's error is the one raised)
    jobs: List[PreprocessJob] = []
    batches = 0

    def run_batch() -> None:
        nonlocal batches
        batches += 1
        with report.external_time("backend"):
            batch = preprocess_partitions(jobs, report)
        for job, result in zip(jobs, batch):
            job.partition.lowered = make_lowered_module(job.program, job.backend_id, result,
                                                        job.compile_specs)
        jobs.clear()

    for backend_id, per_method in by_backend.items():
        cls = find_backend(backend_id)
        specs = {m: [specs_of[m][p.tag].compile_specs for p in parts]
                 for m, parts in per_method.items()}
        if not overrides_preprocess_multimethod(cls):
            for m, parts in per_method.items():
                for part, compile_specs in zip(parts, specs[m]):
                    jobs.append(PreprocessJob(len(jobs), backend_id, cls, part.program,
                                              compile_specs, part.tag, m, backend_copy_hook=True,
                                              partition=part))
            continue
        if jobs:
            run_batch()
        programs = {m: [copy_for_backend(cls, p.program, s) for p, s in zip(parts, specs[m])]
                    for m, parts in per_method.items()}
        with report.preprocess_time([p for parts in per_method.values() for p in parts]):
            results = cls.preprocess_multimethod(programs, specs)
        for m, method_results in results.items():
            for part, result, compile_specs in zip(per_method[m], method_results, specs[m]):
                part.lowered = make_lowered_module(part.program, backend_id, result, compile_specs)
    if jobs or not batches:  # (an empty batch still records the runner in the report)
        run_batch()
    if insert_error is not None:
        raise insert_error
    for per_method in by_backend.values():
        for parts in per_method.values():
            for part in parts:
                part.builder.sim.insert_delegate(part.pid)


def _finish(lowering: MethodLowering, single: bool) -> ExportedProgram:
    """Build the final graphs and the program around the top one."""
    for part in lowering.partitions:
        part.builder.set_delegate_meta(part.pid)
    for builder in lowering.builders:
        parts = [p for p in lowering.partitions if p.builder is builder]  # fusion order
        _attach_modules(builder, parts, single)
        graph = builder.build_graph({
            p.builder.sim.partitions[p.pid].get_attr:
                f"lowered_module_{p.builder.sim.partitions[p.pid].lowered_index}" for p in parts})
        if builder.plan.is_submodule:
            # the reference edits control-flow bodies in place: same module object,
            # its children kept, the new graph installed
            builder.enc.graph_module.graph = graph
        else:
            top_graph = graph
    top = lowering.builders[0]
    signature, state_dict, constants = _final_signature(lowering, top)
    tagged = lowering.tagged
    return ExportedProgram(
        root=top.enc.graph_module, graph=top_graph, graph_signature=signature,
        state_dict=state_dict, range_constraints=copy.deepcopy(tagged.range_constraints),
        module_call_graph=copy.deepcopy(tagged.module_call_graph), example_inputs=None,
        constants=constants, verifiers=[tagged.verifier],
    )


def _attach_modules(builder: GraphBuilder, parts: List[Partition], single: bool) -> None:
    """Add lowered (and, in control-flow bodies, fused) modules in the reference's order."""
    root = builder.enc.graph_module
    nested = builder.plan.is_submodule

    def lowered(part: Partition) -> None:
        index = builder.sim.partitions[part.pid].lowered_index
        root.add_module(f"lowered_module_{index}", part.lowered)

    if single:  # each partition is fused, then lowered, before the next
        for part in parts:
            if nested:
                root.add_module("fused_" + part.tag, part.fused_module)
            lowered(part)
        return
    if nested:
        for part in parts:
            root.add_module("fused_" + part.tag, part.fused_module)
    for part in sorted(parts, key=lambda p: builder.sim.partitions[p.pid].lowered_index):
        lowered(part)


def _final_signature(lowering: MethodLowering, top: GraphBuilder):
    sim = top.sim
    sig = lowering.tagged.graph_signature
    owned = set()
    for p in sim.partitions:
        for m in p.nodes:
            if sim.op[m] == OP_PLACEHOLDER:
                owned.add(sim.names[m])
    real_state = lowering.original.state_dict
    state_dict = {k: real_state.get(k, v) for k, v in lowering.tagged.state_dict.items()}
    constants = dict(lowering.original.constants)
    specs = lowering.input_specs
    spec_by_name = {getattr(s.arg, "name", None): s for s in specs}
    for k in sim.copies:  # in the order the copies were made, as the reference
        # the reference stores each copy under its own key (a deep copy of the
        # tensor); fastlower shares the original's storage under that key
        name = sim.copy_target[k]
        spec = spec_by_name[name]
        value = real_state.get(spec.target, constants.get(spec.target))
        if spec.kind == InputKind.CONSTANT_TENSOR or (
                spec.kind == InputKind.BUFFER and spec.persistent is False):
            constants[name] = value
        else:
            state_dict[name] = value
    input_specs: List[InputSpec] = []
    removed: List[InputSpec] = []
    for spec in specs:
        name = getattr(spec.arg, "name", None)
        (removed if name in owned else input_specs).append(spec)
    used = {s.target for s in input_specs if s.target is not None}
    for spec in removed:
        if spec.target in used:
            continue
        if spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER and spec.persistent):
            state_dict.pop(spec.target, None)
        else:
            constants.pop(spec.target, None)
    output_specs: List[OutputSpec] = []
    for spec_index, node in zip(sim.out_specs, sim.out_args):
        spec = sig.output_specs[spec_index]
        if isinstance(spec.arg, TensorArgument) and node >= 0:
            spec = OutputSpec(kind=spec.kind, arg=TensorArgument(name=sim.names[node]),
                              target=spec.target)
        output_specs.append(spec)
    return ExportGraphSignature(input_specs=input_specs, output_specs=output_specs), \
        state_dict, constants


def lower_program(program: ExportedProgram, partitioner: Partitioner) -> ExportedProgram:
    """``to_backend(program, partitioner)``: the reference's single-program path."""
    report = LoweringReport.start()
    program._validate()
    lowering = _partition("forward", program, partitioner, single=True, report=report)
    report.mark("partition+plan")
    _build_partitions(lowering, single=True)
    _lower_single(lowering, report)
    report.mark("preprocess")
    result = _finish(lowering, single=True)
    report.finish(result, [lowering])
    return result


def lower_methods(programs: Mapping[str, ExportedProgram],
                  partitioners: Mapping[str, Partitioner]) -> Dict[str, ExportedProgram]:
    """``to_backend(MethodProgramsPartitionerSpec)``: lower several methods together."""
    report = LoweringReport.start()
    lowerings: List[MethodLowering] = []
    for name, partitioner in partitioners.items():
        if name not in programs:
            raise errors.MethodWithoutProgramError(name, list(programs))
        programs[name]._validate()
        lowering = _partition(name, programs[name], partitioner, single=False, report=report)
        # the reference fuses and builds every partition of a method before it runs
        # the next method's partitioner; preprocess comes after all methods
        _build_partitions(lowering, single=False)
        lowering.raise_stop()
        lowerings.append(lowering)
    report.mark("partition+plan")
    _lower_multi(lowerings, report)
    report.mark("preprocess")
    done = {lowering.name: _finish(lowering, single=False) for lowering in lowerings}
    result = {name: done.get(name, programs[name]) for name in programs}
    report.finish(result, lowerings)
    return result
