"""Types of the native core ``fastlower._core`` (csrc/, pybind11), interface 12.

Each function and class has a pure-Python twin in ``fastlower.core.twin`` with the same
signature and results; the integer arrays are node ids, op codes and tag ids of the
flat encoding (``fastlower.core.encode``). Generated with pybind11-stubgen, then typed by hand
after the twins; keep in step with ``csrc/bind_*.cpp`` (``CORE_INTERFACE``).
"""

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar, overload

from fastlower.core.schema import GraphArrays, PartitionPlan, PlanOptions, Simulator

_T = TypeVar("_T", covariant=True)

INTERFACE: int

def version() -> str:
    """Version of the native extension (matches the fastlower package version)."""

def abi() -> str:
    """Build/ABI description string: pybind11 version, Python, C++ standard, compiler."""

class Unsupported(ValueError):
    """Input the native core declines (the caller falls back to the twin)."""

# -- grouping, contract, identity -----------------------------------------------------------

def group_by_tag(tags: Sequence[int], n_tags: int) -> list[list[int]]:
    """Node indices of each tag 0..n_tags-1, in node order; -1 and -2 are ignored."""

def find_contract_violation(op: Sequence[int], tags: Sequence[int], roles: Sequence[int],
                            no_copy: Sequence[int], users_offsets: Sequence[int],
                            users_flat: Sequence[int], strict_tags: bool) -> tuple[int, int, int]:
    """The first broken partition rule as (code, node, other node), or (0, -1, -1)."""

def first_difference(op_a: Sequence[int], target_a: Sequence[int], off_a: Sequence[int],
                     in_a: Sequence[int], op_b: Sequence[int], target_b: Sequence[int],
                     off_b: Sequence[int], in_b: Sequence[int]) -> int:
    """Index of the first structurally different node, -1 when the graphs are identical."""

# -- names ----------------------------------------------------------------------------------

def set_name_rules(illegal_names: Iterable[str]) -> None:
    """Install torch.fx's illegal node names (``fastlower.core.name_rules.ILLEGAL_NAMES``).

    ``fastlower.core.loader.load_core()`` calls it before handing out the core; the name
    functions below and ``FusionSimulator`` raise ``RuntimeError`` until it has run.
    """

def snake_case(s: str) -> str:
    """torch.fx.graph._snake_case"""

class Namespace:
    """Same allocation as fastlower.core.twin.namespace.Namespace."""

    def __init__(self, names_in_order: Iterable[str] = ()) -> None: ...
    def create(self, candidate: str) -> str: ...

# -- partitioners ---------------------------------------------------------------------------

def propose_capability_partitions(
    users_offsets: Sequence[int], users: Sequence[int], is_getitem: Sequence[bool],
    supported: Sequence[bool], compute_weight: Sequence[int],
    allows_single_node_partition: bool, skip_horizontal_fusion: bool,
) -> tuple[list[int], list[list[int]], list[int]]:
    """CapabilityBasedPartitioner.propose_partitions on the flat encoding:
    (ids, members, ordered_counts)."""

def propose_group_partitions(
    users_offsets: Sequence[int], users: Sequence[int], inputs_offsets: Sequence[int],
    inputs: Sequence[int], is_getitem: Sequence[bool], supported: Sequence[bool],
    compute_weight: Sequence[int], group_offsets: Sequence[int], group_members: Sequence[int],
    allows_single_node_partition: bool,
) -> tuple[list[int], list[list[int]], list[int]]:
    """GroupBasedPartitioner.propose_partitions on the flat encoding:
    (ids, members, ordered_counts)."""

# -- fusion ---------------------------------------------------------------------------------

def register_types(partition_plan: type[PartitionPlan]) -> None:
    """The dataclass FusionSimulator's partitions are made of (fastlower.core.schema's
    PartitionPlan); fastlower.core.loader registers it on load."""

def plan_graph(arrays: GraphArrays, tag_names: Sequence[str], options: PlanOptions,
               ) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """Plan one graph in one call (constant duplication, then every tag's fusion, each
    delegate inserted when options.delegate_insertion is DELEGATES_WHILE_FUSING, else those
    of options.delegate_order after fusing), up to the first broken rule. Plain data out:
    (graph, stop, insert_stop), the fields of fastlower.core.schema's PlannedGraph (partitions
    as dicts of PartitionPlan's fields) and RuleStop (or None);
    ``fastlower.core.schema.PlanResult.from_core`` makes them the PlanResult that
    fastlower.core.twin.plan.plan_graph returns."""

class _NodeView(Sequence[_T]):
    """Live read-only per-node attribute of a FusionSimulator (indexes like a list).

    Typed as a ``Sequence`` so that it meets ``fastlower.core.schema.Simulator``; at run time
    it is not registered as one (no ``index``/``count``; ``isinstance`` says no).
    """

    __hash__: ClassVar[None]  # type: ignore[assignment]
    def __contains__(self, value: object) -> bool: ...
    def __eq__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> bool: ...
    @overload
    def __getitem__(self, index: int) -> _T: ...
    @overload
    def __getitem__(self, index: slice) -> list[_T]: ...
    def __iter__(self) -> Iterator[_T]: ...
    def __len__(self) -> int: ...
    def tolist(self) -> list[_T]: ...

class FusionSimulator:
    """Replays the reference's fusion edits on integer arrays, step by step; same interface
    and results as fastlower.core.twin.fusion.FusionSimulator. For the differential tests and
    the fuzz harness: the lowering only calls ``plan_graph``."""

    def __init__(self, g: GraphArrays, tag_names: Sequence[str], is_submodule: bool,
                 top: Simulator | None = None, taken_lowered: Iterable[int] = ()) -> None: ...
    def order(self) -> list[int]: ...
    def duplicate_constant(self, c: int) -> list[int]: ...
    def retag_constant(self, c: int) -> None: ...
    def renumber(self) -> None: ...
    def members(self, tag: int) -> list[int]: ...
    def find_cycle(self, members: list[int]) -> list[int] | None: ...
    def fuse(self, tag: int, members: list[int]) -> PartitionPlan: ...
    def legalize(self) -> None: ...
    def insert_delegate(self, pid: int) -> None: ...
    def max_debug_handle(self) -> int: ...
    @property
    def g(self) -> GraphArrays: ...
    @property
    def top(self) -> Simulator: ...
    @property
    def is_submodule(self) -> bool: ...
    @property
    def tag_names(self) -> list[str]: ...
    @property
    def partitions(self) -> list[PartitionPlan]: ...
    @property
    def lowered_count(self) -> int: ...
    @property
    def copies(self) -> list[int]: ...
    @property
    def copy_target(self) -> dict[int, str]: ...
    @property
    def out_args(self) -> list[int]: ...
    @property
    def out_kinds(self) -> list[int]: ...
    @property
    def out_specs(self) -> list[int]: ...
    @property
    def out_targets(self) -> list[int]: ...
    @property
    def output_node(self) -> int: ...
    @property
    def op(self) -> _NodeView[int]: ...
    @property
    def kind(self) -> _NodeView[int]: ...
    @property
    def origin(self) -> _NodeView[int]: ...
    @property
    def inputs(self) -> _NodeView[list[int]]: ...
    @property
    def users(self) -> _NodeView[list[int]]: ...
    @property
    def names(self) -> _NodeView[str]: ...
    @property
    def tags(self) -> _NodeView[int]: ...
    @property
    def alive(self) -> _NodeView[bool]: ...
    @property
    def pos(self) -> _NodeView[int]: ...
    @property
    def getitem_index(self) -> _NodeView[int]: ...
    @property
    def partition_of(self) -> _NodeView[int]: ...
    @property
    def debug_handle(self) -> _NodeView[int]: ...
    @property
    def has_fake_val(self) -> _NodeView[int]: ...
    @property
    def prioritized(self) -> _NodeView[int]: ...

# -- meta watch --------------------------------------------------------------------------

class MetaWatch:
    """Whether the get_source_partitions metadata of some nodes may have changed."""

    def __init__(self, metas: Iterable[object]) -> None:
        """Watch these ``node.meta`` dicts; Unsupported for a value of an unexpected type."""

    def unchanged(self) -> bool:
        """False if anything get_source_partitions reads may have changed since."""

    def __len__(self) -> int: ...

# -- hqq: torchao's scale-only HQQ over float32 buffers (twin: fastlower.core.twin.hqq) ------

def hqq_init_scale(w: Any, group: int, qabs: float, eps: float, scale: Any,
                   threads: int) -> bool:
    """scale[r, g] = max |w| over group g of row r / qabs, at least eps; whether every
    weight is finite."""

def hqq_step(w: Any, group: int, qmin: float, qmax: float, eps: float, scale: Any,
             threads: int) -> float:
    """One HQQ iteration on scale in place; the largest relative change (NaN wins)."""

def hqq_quantize(w: Any, group: int, qmin: float, qmax: float, scale: Any, q: Any,
                 threads: int) -> None:
    """q = clamp(round(w / scale), qmin, qmax) as int32."""

def hqq_ordered_sum(x: Any) -> float:
    """torch's CPU float32 sum of x (8 to 4096 values, a multiple of 8), in its order."""

def hqq_uses_avx2() -> bool:
    """Whether the AVX2 build of the kernels runs."""

def hqq_force_portable(on: bool) -> None:
    """Run the portable build of the kernels (tests); both give the same bits."""
