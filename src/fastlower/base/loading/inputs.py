"""Unpickle a program's saved example inputs with stand-ins for classes not found here."""

from __future__ import annotations

import io
import pickle
import types
from typing import Any

from . import standins


class _StandInUnpickler(pickle.Unpickler):
    """A pickle global that names a stand-in's type (``__main__.Pair``) is the stand-in."""

    def find_class(self, module: str, name: str) -> Any:
        standin = standins.by_name(f"{module}.{name}")
        if standin is not None:
            return standin
        return super().find_class(module, name)


def _pickle_module() -> types.ModuleType:
    module = types.ModuleType("fastlower_standin_pickle")
    module.Unpickler = _StandInUnpickler  # type: ignore[attr-defined]
    module.load = pickle.load  # type: ignore[attr-defined]
    module.loads = pickle.loads  # type: ignore[attr-defined]
    return module


def unpickle(blob: bytes) -> Any:
    """The ``(args, kwargs)`` a ``torch.save`` blob of example inputs holds.

    Like torch's own fallback for example inputs (``weights_only=False``), this
    imports the classes the pickle names; those of the exporting process that
    cannot be imported here become their stand-ins.
    """
    import torch

    return torch.load(io.BytesIO(blob), weights_only=False, pickle_module=_pickle_module())
