"""``to_edge_transform_and_lower`` behind the lowering cache: the drop-in entry point.

:func:`to_edge_transform_and_lower` has the reference's signature and docstring.
With a cache folder set (``fastlower.preprocess.options(cache_dir=...)`` or
``FASTLOWER_CACHE_DIR``) it computes the call's key (:mod:`.key`) *before*
anything runs, then:

* **hit**: the entry's backends still have the sources they had (else: a miss);
  the programs are read back (:mod:`.serialize`) and wrapped in an
  ``EdgeProgramManager`` exactly as the reference's last step wraps its own
  (``compile_config``, ``constant_methods``, the ``compile_config`` side effect
  on the caller's config replayed). No edge stage, partitioner or ``preprocess``
  runs. The report (``last_report()``, ``report_for(manager)``) is read off the
  programs and says ``lowering_cache="hit"``.
* **miss**: the reference's own function runs with fastlower's ``to_backend``
  (its per-partition preprocess cache included); its result is serialized, read
  back and compared with itself (a lowering whose copy would differ is not
  stored, see :mod:`.compare`), then stored.
* **verify** (``FASTLOWER_CACHE_VERIFY=1``): a hit is lowered anyway and compared;
  a difference raises :class:`~.errors.LoweringCacheVerificationError` naming it.
* **not cacheable** (a lambda pass, a partitioner holding an open file,
  ``generate_etrecord=True`` ...): lowered as on a miss, nothing looked up or
  stored, one debug line on ``logging.getLogger("fastlower.cache")`` saying why.

A damaged, truncated or foreign entry is a miss with one
:class:`~fastlower.preprocess.CacheWarning`; a folder that cannot be written is
used for lookups only (one warning per process and folder). The caller's
programs are never modified by a hit; on a miss, as by fastlower's lowering.
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import torch

from executorch.exir import EdgeCompileConfig
from executorch.exir.backend.partitioner import Partitioner
from executorch.exir.pass_manager import ExportedProgramPassManager, PassType
from executorch.exir.program._program import EdgeProgramManager
from torch.export import ExportedProgram
from torch.fx.passes.infra.pass_manager import PassManager as GraphModulePassManager

from . import access, compare, manifest
from .errors import LoweringCacheVerificationError, Uncacheable
from .key import LoweringKey, lowering_key, method_programs
from ..report.memory import record_peak
from .refit import value_reads
from .refit.checkpoint import Refit, skimmable, store_record, try_refit
from .report import report_from_programs
from .configuration import LoweringCacheSettings, resolve
from ..base import phases
from ..base.compat import check_versions
from .store import LoweringStore

from ..in_process import dispatch as patch
from ..in_process import xnnpack_draws
from ..in_process.while_lowering import lowering_step
from ..in_process.stack_room import with_stack_room

log = logging.getLogger("fastlower.cache")



def reference() -> Any:
    """The reference ``to_edge_transform_and_lower`` (as imported before any patching)."""
    return patch.reference_of("to_edge_transform_and_lower")


def to_edge_transform_and_lower(  # noqa: C901
    programs: Union[ExportedProgram, Dict[str, ExportedProgram]],
    transform_passes: Optional[
        Union[
            Sequence[PassType],
            Dict[str, Sequence[PassType]],
            GraphModulePassManager,
            ExportedProgramPassManager,
        ]
    ] = None,
    partitioner: Optional[
        Union[List[Partitioner], Dict[str, List[Partitioner]]]
    ] = None,
    constant_methods: Optional[Dict[str, Any]] = None,
    compile_config: Optional[EdgeCompileConfig] = None,
    generate_etrecord: bool = False,
) -> "EdgeProgramManager":
    check_versions()
    args = dict(transform_passes=transform_passes, partitioner=partitioner,
                constant_methods=constant_methods, compile_config=compile_config,
                generate_etrecord=generate_etrecord)
    settings = resolve()
    if settings.directory is None:
        manager = _lower(programs, args)
        _note_edge_stage(manager)
        return manager
    try:
        key = lowering_key(programs, **args)
    except Uncacheable as why:
        log.debug("to_edge_transform_and_lower not cached: %s", why)
        manager = _lower(programs, args)
        _mark_report(manager, "uncacheable", "", {})
        return manager
    store = access.open_store(settings)
    if store is None:
        return _lower(programs, args)
    try:
        return _cached(store, key, settings, programs, args)
    finally:
        store.close()


# the reference's docstring, word for word (help(), IDEs)
to_edge_transform_and_lower.__doc__ = reference().__doc__


def _cached(store: LoweringStore, key: LoweringKey, settings: LoweringCacheSettings,
            programs: Any, args: Dict[str, Any]) -> EdgeProgramManager:
    seconds = {"key": key.seconds}
    start = time.perf_counter()
    found = access.lookup(store, key.key)
    seconds["load"] = time.perf_counter() - start
    if found is not None and not settings.verify:
        info, payload = found
        manager = _manager(payload["programs"], info, args)
        report = report_from_programs(manager._edge_programs, "hit", key.key, seconds)
        _publish(report, manager)
        _draws_as_reference(info)
        return manager
    refit = try_refit(store, key, programs, lambda: value_reads.refused(
        args["partitioner"], args["transform_passes"], method_programs(programs))) \
        if found is None else None
    if refit is not None and refit.programs is not None:
        seconds["refit"] = refit.seconds
        if not settings.verify:
            return _refitted(store, settings, key, refit, args, seconds)
    start = time.perf_counter()
    manager, added_ops = _lower_recording(programs, args)
    seconds["lower"] = time.perf_counter() - start
    cached = found[1]["programs"] if found is not None else (
        refit.programs if refit is not None else None)
    if cached is not None:  # verify mode
        fresh = compare.describe(manager._edge_programs, manager._config_methods)
        difference = compare.first_difference(
            fresh, compare.describe(cached, manager._config_methods))
        if difference is not None:
            raise LoweringCacheVerificationError(difference, key.key, str(settings.directory))
        _mark_report(manager, "verified", key.key, seconds, refit)
        if found is not None:
            return manager
    if not store.read_only:
        start = time.perf_counter()
        _store_soon(store, settings, key, manager, added_ops, seconds["lower"])
        seconds["store"] = time.perf_counter() - start
    if cached is None:
        _mark_report(manager, "miss", key.key, seconds, refit)
    return manager


def _refitted(store: LoweringStore, settings: LoweringCacheSettings, key: LoweringKey,
              refit: Refit, args: Dict[str, Any], seconds: Dict[str, float]) -> EdgeProgramManager:
    """The manager of a refit lowering (:mod:`.refit`), stored under its own key."""
    manager = _manager(refit.programs or {}, refit.info, args)
    if not store.read_only:
        start = time.perf_counter()
        _store_soon(store, settings, key, manager, list(refit.info.get("exception_ops", [])),
                    float(refit.info.get("lower_seconds", 0.0)), made="refit")
        seconds["store"] = time.perf_counter() - start
    report = report_from_programs(manager._edge_programs, "refit", key.key, seconds)
    report.refit = refit.as_report()
    _publish(report, manager)
    _draws_as_reference(refit.info)
    return manager


def _store(store: LoweringStore, key: LoweringKey, manager: EdgeProgramManager,
           added_ops: List[str], lower_seconds: float, made: str = "lowered") -> None:
    backends = manifest.backends_of(manager._edge_programs)
    # made: "lowered" (the real lowering) or "refit" (by the shortcut generation in the
    # entry's stamp, fastlower.preprocess.keys.SHORTCUTS)
    info = {"backends": backends, "exception_ops": added_ops, "lower_seconds": lower_seconds,
            "created": time.time(), "made": made}
    fresh = compare.describe(manager._edge_programs)

    def same(copy_back: Dict[str, Any]) -> Optional[str]:
        return compare.first_difference(fresh, compare.describe(copy_back["programs"]),
                                        "lowered", "stored copy")

    if access.store_checked(store, key.key, info, {"programs": dict(manager._edge_programs)},
                            same):
        store_record(store, key, backends, skim=skimmable(manager._edge_programs))


def _store_soon(store: LoweringStore, settings: LoweringCacheSettings, key: LoweringKey,
                manager: EdgeProgramManager, added_ops: List[str], lower_seconds: float,
                made: str = "lowered") -> None:
    """:func:`_store`, in a forked child when the entry is large (:mod:`.detached`)."""
    access.store_soon(store, settings, key.key, _data_bytes(manager._edge_programs.values()),
                      lambda target: _store(target, key, manager, added_ops, lower_seconds,
                                            made),
                      also=(key.structure,) if key.structure else ())


def _data_bytes(programs: Iterable[ExportedProgram]) -> int:
    """The programs' tensor data and delegate payloads, in bytes (what an entry mostly holds)."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    size = 0
    for program in programs:
        for value in list(program.state_dict.values()) + list(program.constants.values()):
            if isinstance(value, torch.Tensor):
                size += value.untyped_storage().nbytes()
        for module in program.graph_module.modules():
            if isinstance(module, LoweredBackendModule):
                size += len(module.processed_bytes)
    return size


def _partitioner_rounds(programs: Dict[str, ExportedProgram], partitioner: Any) -> int:
    if partitioner is None:
        return 0
    if not isinstance(partitioner, dict):
        return len(partitioner) if programs else 0
    return max((len(p) for p in partitioner.values()), default=0)


def _manager(programs: Dict[str, ExportedProgram], info: Dict[str, Any],
             args: Dict[str, Any]) -> EdgeProgramManager:
    """The manager the reference's last step would have made around ``programs``."""
    added = manifest.resolve_ops(info.get("exception_ops", []))
    # the reference merges the ops it kept from decomposition into the config it was
    # given (the caller's: a side effect), or into a fresh default one
    config = args["compile_config"] or EdgeCompileConfig()
    config._core_aten_ops_exception_list = list(
        set(config._core_aten_ops_exception_list) | set(added))
    constant_methods = args["constant_methods"]
    if _partitioner_rounds(programs, args["partitioner"]):
        return EdgeProgramManager(programs, copy.deepcopy(constant_methods),
                                  EdgeCompileConfig(_check_ir_validity=False))
    if args["transform_passes"] is not None:
        return EdgeProgramManager(programs, copy.deepcopy(constant_methods), config)
    return EdgeProgramManager(programs, constant_methods, config,
                              core_aten_ops_exception_list=added)


def _lower(programs: Any, args: Dict[str, Any]) -> EdgeProgramManager:
    """The reference's function with fastlower's edge stage (its skipped retraces) and
    ``to_backend`` (its preprocess cache)."""
    from ..lowering.api import to_backend as fastlower_to_backend
    from ..in_process.edge.stage import gen_edge_manager_for_partitioners

    with patch.routed({"to_backend": fastlower_to_backend,
                       "_gen_edge_manager_for_partitioners": gen_edge_manager_for_partitioners}), \
            phases.edge_stage("to_edge_transform_and_lower"), lowering_step():
        # the edge stage (fastlower.in_process.edge), then fastlower's to_backend, with
        # room on the stack
        return with_stack_room(reference(), programs, **args)


def _lower_recording(programs: Any, args: Dict[str, Any]):
    """:func:`_lower`, and the ops it added to the caller's ``compile_config``."""
    config = args["compile_config"]
    before = list(config._core_aten_ops_exception_list) if config is not None else None
    manager = _lower(programs, args)
    if config is None:
        added = list(manager.compile_config._core_aten_ops_exception_list) \
            if not _partitioner_rounds(method_programs(programs), args["partitioner"]) else []
    else:
        added = [op for op in config._core_aten_ops_exception_list if op not in before]
    return manager, manifest.op_names(added)


def _draws_as_reference(info: Dict[str, Any]) -> None:
    """A hit or refit ran no ``preprocess``: the random draws ExecuTorch's would have made
    (:mod:`..in_process.xnnpack_draws`), by the backends the entry records."""
    if any(isinstance(b, dict) and b.get("id") == xnnpack_draws.XNNPACK
           for b in info.get("backends", [])):
        xnnpack_draws.as_reference()


def _publish(report, manager: EdgeProgramManager) -> None:
    from ..report import registry

    registry.publish(report, dict(manager._edge_programs))


def _note_edge_stage(manager: EdgeProgramManager) -> None:
    """The retraces this thread's edge stage just skipped and ran, in the manager's report."""
    from ..in_process.edge.decompose import SKIPPED
    from ..report import registry

    report = registry.report_for(manager)
    if report is not None:
        report.edge_retraces = {"skipped": SKIPPED.skipped, "repeats": SKIPPED.repeats,
                                "run": SKIPPED.run, "reasons": list(SKIPPED.reasons)}


def _mark_report(manager: EdgeProgramManager, status: str, key: str,
                 seconds: Dict[str, float], refit: Optional[Refit] = None) -> None:
    """The live lowering's report (its last ``to_backend``), marked; a lowering that ran no
    ``to_backend`` (no partitioner) gets one read off its programs."""
    from ..report import registry

    report = registry.report_for(manager)
    if report is None:
        report = report_from_programs(manager._edge_programs, status, key, seconds)
        for record in report.partition_records:
            record.cache_hit = None
        report.cache_hits.clear()
        report.refit = refit.as_report() if refit is not None else {}
        _publish(report, manager)
        return
    report.refit = refit.as_report() if refit is not None else {}
    if status in ("miss", "verified", "uncacheable"):  # this thread's edge stage ran
        _note_edge_stage(manager)
    report.lowering_cache = status
    report.lowering_cache_key = key
    report.lowering_cache_seconds = dict(seconds)
    record_peak(report)  # the whole call's peak: the store included
