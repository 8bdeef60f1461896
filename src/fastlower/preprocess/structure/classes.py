"""Structural classes of one lowering's partitions: preprocess two, derive the rest.

A decoder's partitions are a few structures repeated per block. For a backend whose
output this package can re-make (:data:`DERIVERS`), partitions are grouped by structure
key (:mod:`.shape_key`). In a class of three or more, the first member (the
representative) and the second (the probe) are preprocessed for real; the template
learnt from the representative (:mod:`.template`) must re-make the probe's real result
byte for byte, or the class is not derived. The other members are then derived. Any
member the template cannot re-make is preprocessed for real, and why is recorded.
A proven template is kept for the rest of the process and, when a preprocess cache is
open, in the cache (plain data under the folder's MAC): later lowerings, in this process
or another (a new checkpoint of the same model), derive every member of a class they
share, a class of one included.

Modes (``preprocess.options(classes=...)``, ``FASTLOWER_PREPROCESS_CLASSES``):
``derive`` as above; ``verify`` preprocesses every member for real and raises
:class:`DerivationVerificationError` when a derived result differs; ``off``.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from executorch.exir.backend.backend_details import PreprocessResult

from ..jobs import PreprocessJob
from .shape_key import PartitionShape, partition_shape
from .template import NotDerivable, Template, derive, from_plain, learn, to_plain

log = logging.getLogger(__name__)

# backends whose results a template re-makes: backend id -> the class's module and name
DERIVERS = {"XnnpackBackend": "executorch.backends.xnnpack.xnnpack_preprocess.XnnpackBackend"}
SMALLEST_CLASS = 3  # below it, two real preprocesses would cost what deriving saves
CACHE_PURPOSE = "preprocess-template"
_KEPT = 512  # proven templates kept per process

_TEMPLATES: "collections.OrderedDict[str, Template]" = collections.OrderedDict()
_TEMPLATES_LOCK = threading.Lock()


class DerivationVerificationError(RuntimeError):
    """Verify mode: a derived preprocess result differs from the backend's own."""


@dataclass
class ClassStats:
    """What the report says about one lowering's classes."""

    classes: int = 0  # classes of two or more members
    derived: int = 0
    verified: int = 0  # derived and compared with a real preprocess (probe, verify mode)
    fallbacks: List[Tuple[str, str]] = field(default_factory=list)  # (tag, why)

    def as_dict(self) -> Dict[str, object]:
        return {"classes": self.classes, "derived": self.derived, "verified": self.verified,
                "fallbacks": [{"tag": t, "why": w} for t, w in self.fallbacks]}


def derivable(job: PreprocessJob) -> bool:
    backend = job.backend
    return (job.parallel_ok and job.backend_id in DERIVERS
            and f"{backend.__module__}.{backend.__qualname__}" == DERIVERS[job.backend_id])


def _remembered(key: str) -> Optional[Template]:
    with _TEMPLATES_LOCK:
        found = _TEMPLATES.get(key)
        if found is not None:
            _TEMPLATES.move_to_end(key)
        return found


def _remember(template: Template) -> None:
    with _TEMPLATES_LOCK:
        _TEMPLATES[template.key] = template
        while len(_TEMPLATES) > _KEPT:
            _TEMPLATES.popitem(last=False)


def forget_templates() -> None:
    """Drop the templates this process has proven."""
    with _TEMPLATES_LOCK:
        _TEMPLATES.clear()


def _same(a: PreprocessResult, b: PreprocessResult) -> bool:
    from ..cache import same_result

    return same_result(a, b)


class ClassPlan:
    """The classes of a batch of jobs: which run first, which are derived after.

    ``first`` lists the jobs to preprocess now; :meth:`resolve` takes their results and
    returns the derived results and the jobs still to preprocess."""

    def __init__(self, jobs: List[PreprocessJob], mode: str, cache=None):
        self.mode = mode
        self.cache = cache  # a PreprocessCache, or None
        self.stats = ClassStats()
        self.shapes: Dict[int, PartitionShape] = {}
        self.groups: Dict[str, List[PreprocessJob]] = {}
        if mode != "off":
            self._group(jobs)
        self.first = [job for job in jobs if not self._waits(job)]

    def _known(self, key: str) -> Optional[Template]:
        """The proven template of ``key``: this process's, else the cache's."""
        template = _remembered(key)
        if template is not None or self.cache is None:
            return template
        value = self.cache.get_plain(CACHE_PURPOSE, key)
        if value is None:
            return None
        try:
            template = from_plain(value)
        except NotDerivable as exc:
            log.debug("cached template %s not used: %s", key[:16], exc)
            return None
        if template.key != key:
            return None
        _remember(template)
        return template

    def _group(self, jobs: List[PreprocessJob]) -> None:
        for job in jobs:
            if not derivable(job):
                continue
            try:
                shape = partition_shape(job)
            except Exception as exc:  # a constant that is no tensor, an unreadable meta
                log.debug("partition %s not classified: %r", job.tag, exc)
                continue
            self.shapes[job.index] = shape
            self.groups.setdefault(shape.key, []).append(job)
        # a class of one is derived only from a template proven before
        self.groups = {k: v for k, v in self.groups.items()
                       if len(v) > 1 or self._known(k) is not None}
        self.stats.classes = len(self.groups)

    def _waits(self, job: PreprocessJob) -> bool:
        """Whether the job is derived after the first round instead of run in it."""
        if self.mode != "derive" or job.index not in self.shapes:
            return False
        members = self.groups.get(self.shapes[job.index].key)
        if members is None:
            return False
        if self._known(self.shapes[job.index].key) is not None:
            return True
        return len(members) >= SMALLEST_CLASS and members.index(job) >= 2

    def resolve(self, done: Dict[int, PreprocessResult]
                ) -> Tuple[Dict[int, PreprocessResult], List[PreprocessJob]]:
        """Derived results by job index, and the jobs to preprocess for real now."""
        derived: Dict[int, PreprocessResult] = {}
        rerun: List[PreprocessJob] = []
        for key, members in self.groups.items():
            template, why = self._template(key, members, done)
            for job in members:
                if job.index in done and self.mode == "derive":
                    continue
                self._member(job, template, why, done, derived, rerun)
            if template is not None and self.mode == "verify":
                self._proven(template)  # every member compared: none differed
        return derived, rerun

    def _proven(self, template: Template) -> None:
        """Keep a template shown to re-make real results, here and in the cache."""
        if _remembered(template.key) is not None:
            return
        _remember(template)
        if self.cache is not None:
            self.cache.put_plain(CACHE_PURPOSE, template.key, to_plain(template))

    def _template(self, key: str, members: List[PreprocessJob],
                  done: Dict[int, PreprocessResult]) -> Tuple[Optional[Template], str]:
        """The class's proven template, or ``None`` and why not."""
        template = self._known(key)
        if template is not None:
            return template, ""
        representative = members[0]
        if representative.index not in done:
            return None, "no real preprocess of the class ran"
        try:
            template = learn(self.shapes[representative.index], done[representative.index])
        except NotDerivable as exc:
            return None, str(exc)
        probe = members[1]
        if self.mode == "derive":  # verify mode checks every member below
            if probe.index not in done:
                return None, "no second member ran"
            try:
                again = derive(template, self.shapes[probe.index])
            except NotDerivable as exc:
                return None, f"second member: {exc}"
            self.stats.verified += 1
            if not _same(again, done[probe.index]):
                return None, "the result derived for a second member differed from its own"
            self._proven(template)
        return template, ""

    def _member(self, job: PreprocessJob, template: Optional[Template], why: str,
                done: Dict[int, PreprocessResult], derived: Dict[int, PreprocessResult],
                rerun: List[PreprocessJob]) -> None:
        if template is None:
            self.stats.fallbacks.append((job.tag, why))
            if job.index not in done:
                rerun.append(job)
            return
        try:
            result = derive(template, self.shapes[job.index])
        except NotDerivable as exc:
            self.stats.fallbacks.append((job.tag, str(exc)))
            if job.index not in done:
                rerun.append(job)
            return
        if job.index in done:  # verify mode
            if not _same(result, done[job.index]):
                raise DerivationVerificationError(
                    f"the result derived for {job.describe()} differs from its preprocess "
                    f"(structure {template.key[:16]})")
            self.stats.verified += 1
            return
        derived[job.index] = result
        self.stats.derived += 1
