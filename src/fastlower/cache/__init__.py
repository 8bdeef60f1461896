"""A content-addressed cache of whole ``to_edge_transform_and_lower`` calls.

``fastlower.cache.to_edge_transform_and_lower`` is the reference's function behind a
cache: same signature, same result; on a hit no edge stage, partitioner or backend
runs. ``fastlower.cache.to_executorch`` does the same for
``EdgeProgramManager.to_executorch``. Both use the preprocess cache's folder and
options. ``info()`` / ``clear()`` describe and empty both caches.

Modules: ``configuration`` (folder, switch), ``object_text`` (objects in canonical form),
``key`` (the key), ``symbolic`` (fake tensors, symbolic sizes), ``serialize``
(programs as bytes: a package of writer, reader, graph records and objects kept
by name), ``entry`` (an entry's format), ``manifest`` (backends checked on
a hit), ``names`` (keys and tag), ``store`` (the diskcache folder), ``compare`` (first difference),
``report`` (the report of a hit), ``access`` (lookup and store rules), ``cached_lowering``
(the ``to_edge_transform_and_lower`` entry point), ``executorch`` (the ``to_executorch``
entry point), ``execution`` (its execution programs, made when first read), ``admin``
(info / clear).
"""

from typing import TYPE_CHECKING

from ..base.lazy import lazy_exports

_EXPORTS = {
    "to_edge_transform_and_lower": "cached_lowering", "to_executorch": "executorch",
    "LoweringCacheVerificationError": "errors", "ExecutionProgramsUnavailable": "errors",
    "disabled": "configuration", "info": "admin", "clear": "admin", "CacheInfo": "admin",
}

__all__ = sorted(_EXPORTS)

# imported on first use: ``info`` / ``clear`` need no torch
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from .admin import CacheInfo, clear, info  # noqa: F401
    from .errors import ExecutionProgramsUnavailable, LoweringCacheVerificationError  # noqa: F401
    from .executorch import to_executorch  # noqa: F401
    from .cached_lowering import to_edge_transform_and_lower  # noqa: F401
    from .configuration import disabled  # noqa: F401
