"""A content-addressed cache of whole ``to_edge_transform_and_lower`` calls (issue 18).

``fastlower.cache.to_edge_transform_and_lower`` is the reference's function behind a
cache: same signature, same result; on a hit no edge stage, partitioner or backend
runs. ``fastlower.cache.to_executorch`` does the same for
``EdgeProgramManager.to_executorch``. Both use the preprocess cache's folder and
options. ``info()`` / ``clear()`` describe and empty both caches.

Modules: ``settings`` (folder, switch), ``canonical`` (objects in canonical form),
``key`` (the key), ``symbolic`` (fake tensors, symbolic sizes), ``serialize``
(programs as bytes: a package of writer, reader, graph records and objects kept
by name), ``entry`` (an entry's format), ``manifest`` (backends checked on
a hit), ``store`` (the diskcache folder), ``compare`` (first difference),
``report`` (the report of a hit), ``access`` (lookup and store rules), ``lowering``
(the ``to_edge_transform_and_lower`` entry point), ``executorch`` (the ``to_executorch``
entry point), ``execution`` (its execution programs, made when first read), ``admin``
(info / clear).
"""

from .admin import CacheInfo, clear, info
from .errors import ExecutionProgramsUnavailable, LoweringCacheVerificationError
from .executorch import to_executorch
from .lowering import to_edge_transform_and_lower
from .settings import disabled

__all__ = ["to_edge_transform_and_lower", "to_executorch", "LoweringCacheVerificationError",
           "ExecutionProgramsUnavailable", "disabled", "info", "clear", "CacheInfo"]
