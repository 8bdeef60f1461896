"""Fake outputs known without running the operator, inside fastlower's lowering steps.

ExecuTorch's ``ExportPass`` re-runs every node on fake tensors to rebuild its
``meta["val"]``, in every pass. Three kinds of call cost most of that and give what is
already known:

* :mod:`.delegates`: a delegate call, whose original program records its outputs;
* :mod:`.repeated`: a call torch's fake-tensor cache cannot tell apart from one an
  earlier pass made: that call's output objects;
* :mod:`.quant_ops`: torchao's quantization operators, whose outputs depend only on
  their inputs' metadata and which a decoder calls alike in every layer and pass.

Inside a :func:`known_outputs` block (this thread or asyncio task) their outputs are
known without the run when that provably gives the same; :mod:`.compare` is how fake
values are compared, :mod:`.emit` how a node is made with known outputs.
``FASTLOWER_FAKE_OUTPUTS``: ``reuse`` (the default), ``run`` (ExecuTorch's way
throughout), ``verify`` (both, compared; :class:`FakeOutputsVerificationError` at the
first difference). The patches (``ExportPass.call_delegate``,
``_ExportPassBase._fx`` and torch's ``_ExportPassBaseDeprecatedDoNotUse._fx``) are bound by
the first block and kept until :func:`uninstall`; outside a block they run the bases' own
methods.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from ... import settings
from . import delegates, quant_ops
from .compare import FakeOutputsVerificationError
from .scope import LAST, Scope, enter, leave

__all__ = ["FakeOutputsVerificationError", "LAST", "installed", "known_outputs", "uninstall"]

_PATCHES = (delegates.PATCH, quant_ops.PATCH, quant_ops.TORCH_PATCH)


def installed() -> bool:
    """Whether the patches are bound now."""
    return all(patch.installed() for patch in _PATCHES)


def uninstall() -> None:
    """Puts ExecuTorch's methods back (a binding someone made after fastlower's stays);
    the next :func:`known_outputs` block binds them again."""
    for patch in _PATCHES:
        patch.uninstall()


@contextmanager
def known_outputs() -> Iterator[Optional[Scope]]:
    """Inside the block, in this thread or task, the outputs of delegate calls and of
    quantization operators are known without running them when that provably gives the
    same (see the module). Yields the block's counts, or None with
    ``FASTLOWER_FAKE_OUTPUTS=run``. Blocks nest (each counts its own calls)."""
    mode = settings.choice(settings.FAKE_OUTPUTS)
    if mode == "run":
        yield None
        return
    for patch in _PATCHES:
        patch.install()
    scope = Scope(mode)
    token = enter(scope)
    try:
        yield scope
    finally:
        leave(token, scope)
