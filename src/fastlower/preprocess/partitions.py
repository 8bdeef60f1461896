"""Preprocess a lowering's partitions: cache look-up, then serial, fork pool or executor.

``lowering/`` calls :func:`preprocess_partitions` with every partition of a
lowering that goes through a backend's ``preprocess`` (all of them on the
single-program path; on the multi-method path those of backends that keep
``BackendDetails.preprocess_multimethod``, whose default calls ``preprocess``
per partition). Results come back in the jobs' order, whatever order they
were computed in, so the lowered program is the same as a serial run's.

Backends that override ``preprocess_multimethod`` may share state between
their partitions: their jobs run serially, in order, in this process, and
are neither cached nor sent to workers.

Before the first fork pool of a backend in this process, its cheapest partition
runs here (:func:`prime`): a backend's first ``preprocess`` in a process fills
caches that later calls reuse (XNNPACK traces its SDPA and bilinear pattern
graphs with ``torch.export``, ~10 s each, on first use), and forked workers
inherit them instead of each filling its own. Without it every worker's first
partition paid that again, for every lowering, and two workers saved little.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from concurrent.futures import Executor
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple, cast

from executorch.exir.backend.backend_details import PreprocessResult

from .cache import CacheWarning, PreprocessCache, same_result
from .executors import (
    EarliestFailure, choose_runner, run_fork_pool, run_on_executor, run_serial, run_spawn_pool,
)
from .failures import CacheVerificationError
from .folder import UntrustedFolder, tell_once, warn_read_only, warn_untrusted
from .jobs import PreprocessJob, call_preprocess, estimated_cost
from ..in_process import xnnpack_draws
from .code_digests import NoSourceFile
from .keys import TensorDigests, cache_key
from .progress import partition_bar
from .configuration import ResolvedOptions, resolve
from ..report.model import classes_text
from .stored_later import Held, wait_for
from .structure.classes import ClassPlan

log = logging.getLogger(__name__)


# backend classes that have preprocessed a partition in this process (see prime())
_PRIMED: Set[type] = set()
_PRIMED_LOCK = threading.Lock()


def prime(jobs: Sequence[PreprocessJob], done: Callable[[PreprocessJob, PreprocessResult, float],
                                                        None],
          failure: EarliestFailure) -> List[PreprocessJob]:
    """Run, here, the cheapest job of each backend that has not preprocessed in this
    process yet; the jobs left for the workers.

    A primer's failure is recorded like any other; the jobs after it are then not
    needed (the earliest failure is raised), the ones before it still run.
    """
    with _PRIMED_LOCK:
        primers: Dict[type, PreprocessJob] = {}
        for job in sorted(jobs, key=estimated_cost):  # stable: ties keep graph order
            # the cheapest job of each backend: the other cores wait for it
            if job.backend not in _PRIMED and job.backend not in primers:
                primers[job.backend] = job
        _PRIMED.update(primers)
    for job in primers.values():
        try:
            result, seconds = call_preprocess(job)
        except Exception as exc:
            failure.record(job, exc)
            continue
        done(job, result, seconds)
    chosen = {id(job) for job in primers.values()}
    return [j for j in jobs if id(j) not in chosen and failure.still_needed(j)]


def _runner_label(runner: str, opts: ResolvedOptions, parallel: int) -> str:
    if runner in ("fork", "spawn"):
        return f"{runner} pool, {min(opts.workers, parallel)} workers"
    if runner == "executor":
        return f"executor {type(opts.executor).__name__}"
    return "serial"


def _open_cache(opts: ResolvedOptions) -> Optional[PreprocessCache]:
    """The cache, or ``None`` when off or when its directory cannot be used (one warning)."""
    if opts.cache_dir is None:
        return None
    try:
        cache = PreprocessCache(opts.cache_dir, opts.cache_size, opts.cache_key_file)
    except UntrustedFolder as exc:
        warn_untrusted(opts.cache_dir, exc, stacklevel=3)
        return None
    except Exception as exc:
        warnings.warn(f"fastlower: preprocess cache {opts.cache_dir} cannot be opened ({exc!r}); "
                      "lowering without it", CacheWarning, stacklevel=3)
        return None
    if cache.read_only:
        warn_read_only(cache.directory, stacklevel=3)
    return cache


def _run_jobs(jobs: Sequence[PreprocessJob], opts: ResolvedOptions,
              done: Callable[[PreprocessJob, PreprocessResult, float], None], report) -> None:
    """Preprocess ``jobs`` for real: the backends' jobs in the chosen runner, then the
    serial-only ones; of all failures, the earliest partition's is raised."""
    parallel = [j for j in jobs if j.parallel_ok]
    serial = [j for j in jobs if not j.parallel_ok]
    runner = choose_runner(opts.workers, opts.executor, parallel, opts.start_method)
    if not report.preprocess_runner:
        report.preprocess_runner = _runner_label(runner, opts, len(parallel))
    if not jobs:
        return
    # a backend's failure in the batch is held until the serial jobs before it
    # have run: of all failures, the earliest partition's is raised
    failure = EarliestFailure()
    try:
        if runner == "fork":
            rest = prime(parallel, done, failure)
            if len(rest) > 1:
                run_fork_pool(rest, opts.workers, done, failure)
            else:
                run_serial(rest, done, failure)
        elif runner == "spawn":
            # spawned workers inherit nothing: priming here would not help them
            run_spawn_pool(parallel, opts.workers, done, failure)
        elif runner == "executor":  # chosen only when an executor was given
            run_on_executor(parallel, cast(Executor, opts.executor), done, failure)
        else:
            run_serial(parallel, done, failure)
    except Exception as exc:
        if not failure.is_raised(exc):
            raise
    run_serial(serial, done, failure)


def _look_up(jobs: Sequence[PreprocessJob], cache: Optional[PreprocessCache], report
              ) -> Tuple[Dict[int, str], Dict[int, PreprocessResult]]:
    """Each cacheable job's key and the results the cache holds, by job index."""
    keys: Dict[int, str] = {}
    cached: Dict[int, PreprocessResult] = {}
    if cache is None:
        return keys, cached
    start = time.perf_counter()
    digests: TensorDigests = {}
    for job in jobs:
        if job.parallel_ok:
            try:
                keys[job.index] = cache_key(job, digests)
            except NoSourceFile as why:  # run, not cached
                log.debug("partition %d not cached: %s", job.index, why)
    report.cache_key_seconds += time.perf_counter() - start
    for index, key in keys.items():
        wait_for(key)  # a child of this process may be storing it
        found = cache.get(key)
        if found is not None:
            cached[index] = found
    return keys, cached


def preprocess_partitions(jobs: Sequence[PreprocessJob], report) -> List[PreprocessResult]:
    """Each job's ``PreprocessResult``, in the jobs' order (``job.index`` = position)."""
    opts = resolve()
    results: List[Optional[PreprocessResult]] = [None] * len(jobs)
    seconds: List[float] = [0.0] * len(jobs)
    hit: List[Optional[bool]] = [None] * len(jobs)
    cache = _open_cache(opts)
    held = Held(cache) if cache is not None else None
    try:
        keys, cached = _look_up(jobs, cache, report)
        to_run = [j for j in jobs if j.index not in cached or opts.verify]

        def done(job: PreprocessJob, result: PreprocessResult, took: float) -> None:
            i = job.index
            seconds[i] = took
            if i in cached:  # verify mode: the fresh result must equal the cached one
                if not same_result(cached[i], result):
                    raise CacheVerificationError(
                        f"the cached preprocess result of {job.describe()} differs from a fresh "
                        f"preprocess (key {keys[i]}, cache {opts.cache_dir}); the backend is not "
                        "deterministic or its key misses an input")
                result = cached[i]
            elif held is not None and i in keys:
                held.put(keys[i], result)
            results[i] = result
            hit[i] = (i in cached) if i in keys else None
            bar.update(1)

        # a cache being verified runs every partition: classes are then verified too
        plan = ClassPlan(list(to_run), "verify" if opts.verify and opts.classes != "off"
                         else opts.classes, cache)
        with partition_bar(len(jobs), opts.progress) as bar:
            for index in cached:
                if not opts.verify:
                    results[index], hit[index] = cached[index], True
                    bar.update(1)
            _run_jobs(plan.first, opts, done, report)
            real = {job.index: results[job.index] for job in plan.first
                    if results[job.index] is not None}
            derived, rerun = plan.resolve(real)
            for index, result in derived.items():
                results[index], hit[index] = result, (False if index in keys else None)
                if held is not None and index in keys:
                    held.put(keys[index], result, made="derived")
                bar.update(1)
            _run_jobs(rerun, opts, done, report)
        if any(job.backend_id == xnnpack_draws.XNNPACK for job in jobs):
            xnnpack_draws.as_reference()  # what ExecuTorch's first XNNPACK preprocess draws
        counts = plan.stats.as_dict()
        report.record_classes(counts)
        if plan.stats.classes:  # shown with the phase lines (the CLI, fastlower run)
            logging.getLogger("fastlower.base.phases").info("%s", classes_text(counts))
    finally:
        if cache is not None:
            cast(Held, held).store()  # what was held for after the batch
            if cache.damaged:
                tell_once(cache.directory, "damaged",
                          f"fastlower: {len(cache.damaged)} damaged preprocess cache entr"
                          f"{'y' if len(cache.damaged) == 1 else 'ies'} in {opts.cache_dir} "
                          f"treated as misses and dropped ({'; '.join(cache.damaged[:3])})",
                          stacklevel=2)
            if cache.write_errors:
                warnings.warn(
                    f"fastlower: {len(cache.write_errors)} preprocess result(s) could not be "
                    f"written to the cache {opts.cache_dir} ({cache.write_errors[0]})",
                    CacheWarning, stacklevel=2)
            cache.close()
    for job in jobs:
        report.record_preprocess(job.partition, job.backend_id, seconds[job.index],
                                 hit[job.index], job.tag, job.method)
    return results
