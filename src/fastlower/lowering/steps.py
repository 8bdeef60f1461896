"""The steps both lowering paths share: partition and plan one method, build its
partition programs, and build the lowered program around its top graph.

A path (:mod:`.single`, :mod:`.multi`) subclasses :class:`LoweringPath` and
says only where the reference's two paths differ: when delegates are inserted
(``delegate_insertion``, a ``_schema.PlanOptions`` value stated once per path:
while fusing, or after every partition is fused; the plan carries it, and the
partition program's output meta follows from it), and the order lowered modules
are attached.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional

import torch
from executorch.exir.backend.partitioner import Partitioner, PartitionResult
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.export.exported_program import ExportGraphSignature, InputSpec

from .. import errors
from ..base import state
from .apply import GraphBuilder, Partition, SignatureIndex
from .edits import PartitionerEdits, find_edits
from ..core.encode import EncodedGraph, Interner, encode_graph, taken_lowered_indices
from ..partitioners import accelerated as native_partitioners
from ..core.plan import GraphPlan, plan_program, structure_difference
from .programs import lazy_module_copy, unvalidated_program
from ..base.records import MethodRecord, PartitionOutcome, graph_of_encoded
from ..report.document import LoweringReport
from .order import ErrorOrder
from .signature import final_signature, input_specs_after_duplication

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
    order: ErrorOrder  # which error is raised, and when
    builders: List[GraphBuilder] = field(default_factory=list)  # top first, then nested
    partitions: List[Partition] = field(default_factory=list)
    input_specs: List[InputSpec] = field(default_factory=list)  # after constant duplication

    def backend_id(self, part: Partition) -> str:
        """The backend the partitioner chose for ``part``'s tag."""
        return self.result.partition_tags[part.tag].backend_id


def _collect_builders(lowering: MethodLowering, plan: GraphPlan) -> None:
    lowering.builders.append(GraphBuilder(plan, lowering.tag_names))
    for _, _, sub in plan.nested:
        _collect_builders(lowering, sub)


class LoweringPath:
    """The steps of one ``to_backend`` call both of the reference's paths share.

    A subclass is one path: it runs the steps in its order, states when delegates are
    inserted (:attr:`delegate_insertion`) and implements the order lowered modules
    are attached (:meth:`attach_modules`).
    """

    # DELEGATES_WHILE_FUSING (single program) or DELEGATES_AFTER_FUSING (multi-method)
    delegate_insertion: int

    def __init__(self, report: LoweringReport) -> None:
        self.report = report

    # -- where the paths differ ---------------------------------------------------
    def attach_modules(self, builder: GraphBuilder, parts: List[Partition]) -> None:
        """Add ``parts``' lowered (and, in control-flow bodies, fused) modules to the
        graph module, in the reference's order (``parts`` in fusion order)."""
        raise NotImplementedError

    # -- shared steps ------------------------------------------------------------
    def plan(self, encoded: EncodedGraph, tag_names: List[str],
             validate_tagged: Optional[Callable[[], None]]) -> GraphPlan:
        """Duplicate shared constants and fuse every tag (``plan.plan_program``)."""
        return plan_program(encoded, tag_names, self.delegate_insertion,
                            strict_tags=state.strict_tags_enabled(),
                            validate_tagged=validate_tagged)

    def build_partition(self, builder: GraphBuilder, pid: int, lowering: MethodLowering,
                        sig: SignatureIndex) -> Partition:
        """Partition ``pid``'s fused module and program (``GraphBuilder.build_partition``)."""
        original = lowering.original
        return builder.build_partition(pid, lowering.tagged, sig, original.state_dict,
                                       original.constants)

    def partition(self, name: str, program: ExportedProgram,
                  partitioner: Partitioner) -> MethodLowering:
        """Run the partitioner on a fake copy, check what it changed, encode and plan."""
        fake = make_fake_program(program)
        # canonical partitioners propose natively (FASTLOWER_NATIVE_PARTITIONERS=0: off)
        with self.report.external_time("partitioner"), native_partitioners():
            result = partitioner(fake)
        tagged = result.tagged_exported_program
        validating = state.validation_enabled()
        if validating:
            check_unmodified(tagged, program, partitioner)
        else:
            log.warning("Disabled validating the partitioner.")
        edits = find_edits(tagged.graph_module, program.graph_module,
                           structure_checked=validating)
        if edits:
            _report_edits(edits, partitioner,
                          strict=validating and state.strict_partitioners_enabled())
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
        plan = self.plan(encoded, tag_names, tagged._validate if edits else None)
        lowering = MethodLowering(name, program, tagged, result, tag_names, plan, edits,
                                  ErrorOrder(plan))
        _collect_builders(lowering, plan)
        return lowering

    def build_partitions(self, lowering: MethodLowering) -> None:
        """Each partition's program, in the reference's order, up to the method's stop.

        A partition program the verifier rejects becomes the stop (the reference
        rejects it building that program, before any later partition is fused).
        """
        order = lowering.order
        lowering.input_specs = input_specs_after_duplication(
            lowering.builders[0], lowering.tagged.graph_signature)
        sig = SignatureIndex(ExportGraphSignature(
            input_specs=lowering.input_specs,
            output_specs=list(lowering.tagged.graph_signature.output_specs)))
        for builder in lowering.builders:
            for pid in range(order.partitions_to_build(builder)):
                part = self.build_partition(builder, pid, lowering, sig)
                if (lowering.edits and lowering.edits.touches(builder.enc.graph_module,
                                                              builder.original_members(pid))) \
                        or builder.has_input_without_value(pid):
                    # what the input's verifier run did not cover (an edit the reference's
                    # check does not see, a placeholder without a value): the partition
                    # program's verifier run is where the reference rejects it
                    try:
                        part.program._validate()
                    except Exception as exc:  # the verifier's own error is the error
                        order.program_rejected(exc, builder, pid)
                        return
                lowering.partitions.append(part)
            if order.stops_in(builder):
                return

    def finish(self, lowering: MethodLowering) -> ExportedProgram:
        """Build the final graphs and the program around the top one."""
        for part in lowering.partitions:
            part.builder.set_delegate_meta(part.pid)
        for builder in lowering.builders:
            parts = [p for p in lowering.partitions if p.builder is builder]  # fusion order
            self.attach_modules(builder, parts)
            graph = builder.build_graph({
                p.builder.graph.partitions[p.pid].get_attr:
                    f"lowered_module_{p.builder.graph.partitions[p.pid].lowered_index}"
                for p in parts})
            if builder.plan.is_submodule:
                # the reference edits control-flow bodies in place: same module object,
                # its children kept, the new graph installed
                builder.enc.graph_module.graph = graph
            else:
                top_graph = graph
        top = lowering.builders[0]
        tagged = lowering.tagged
        signature, state_dict, constants = final_signature(
            top.graph, tagged, lowering.original, lowering.input_specs)
        return ExportedProgram(
            root=top.enc.graph_module, graph=top_graph, graph_signature=signature,
            state_dict=state_dict, range_constraints=copy.deepcopy(tagged.range_constraints),
            module_call_graph=copy.deepcopy(tagged.module_call_graph), example_inputs=None,
            constants=constants, verifiers=[tagged.verifier],
        )


def method_record(lowering: MethodLowering, report: LoweringReport) -> MethodRecord:
    """What the report reads of a lowered method (``fastlower.base.records``), nothing else."""
    paths: Dict[int, str] = {}  # id(encoded graph) -> its path in the method
    graph = graph_of_encoded(lowering.builders[0].enc, paths=paths)
    return MethodRecord(lowering.name, graph, lowering.result.partition_tags, [
        PartitionOutcome(paths.get(id(p.builder.enc), ""), p.tag, p.program,
                         None if p.lowered is None else len(p.lowered.processed_bytes),
                         *report.partition_timing(p))
        for p in lowering.partitions])


def add_lowered_module(builder: GraphBuilder, part: Partition) -> None:
    """Add ``part``'s lowered module under the name its ``get_attr`` reads."""
    index = builder.graph.partitions[part.pid].lowered_index
    builder.enc.graph_module.add_module(f"lowered_module_{index}", part.lowered)


def add_fused_module(builder: GraphBuilder, part: Partition) -> None:
    """Add ``part``'s fused module (kept on control-flow bodies only, as the reference)."""
    builder.enc.graph_module.add_module("fused_" + part.tag, part.fused_module)
