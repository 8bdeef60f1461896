"""A shared second tier for the lowering cache: one store a fleet of machines shares.

The local cache folder stays the first tier. A store named by a URL
(``FASTLOWER_SHARED_CACHE``, ``--shared-cache``, :func:`options`), ``file:///path``
or ``s3://bucket/prefix``, is looked up after a local miss (a hit fills the local
folder) and receives each entry the local folder stored, in the background. Objects
are content-addressed and immutable (one per entry, written once by a conditional
put or a link into place), signed with the folder's key as local entries are, and a
store that fails in any way is a miss, never a failed lowering.

Modules, one idea each: ``configuration`` (the URL and options), ``client`` (obstore,
every request bounded in time), ``tier`` (the two-tier lookup and store), ``upload``
(the background upload thread and the wait at exit), ``stats`` (the last runs'
counts), ``admin`` (``fastlower cache info|push|pull``).
"""

from typing import TYPE_CHECKING

from ...base.lazy import lazy_exports

_EXPORTS = {
    "options": "configuration", "set_options": "configuration", "resolve": "configuration",
    "SharedStoreSettingsError": "configuration", "push": "admin", "pull": "admin",
    "describe": "admin",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from .admin import describe, pull, push  # noqa: F401
    from .configuration import (  # noqa: F401
        SharedStoreSettingsError, options, resolve, set_options,
    )
