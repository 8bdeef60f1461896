"""Storages of a cache entry read for its MAC but not kept (:func:`.entry.read`'s ``skim``).

A refit reads checkpoint A's whole entry to re-make it for B, and replaces every tensor
the programs hold outside delegates by B's (:mod:`.refit`); of those it needs only their
content digest and whether they are uniform. Skimming the large ones (the embedding of an
LLM: a GB) keeps the process from holding A's copy beside B's. The MAC still covers every
byte, and nothing is decoded before it verifies: a skimmed storage's digest and flag are
of the bytes the MAC took.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import FrozenSet, List, Optional

import torch

# the attribute of a placeholder tensor that holds its storage's Skimmed
SKIMMED = "_fastlower_skimmed"


@dataclass(frozen=True)
class Skimmed:
    """A storage read but not kept: its size, the xxh3-128 of its bytes (the content
    digest of a tensor that is the whole storage) and whether its first piece repeats every
    16 bytes (false: no tensor over the whole storage is uniform)."""

    size: int
    digest: str
    periodic: bool


@dataclass
class Skim:
    """Which storages to skim (``sizes``: those of these byte sizes), and what the payload
    holds in their place: meta tensors (``placeholders``, weakly) carrying their
    :class:`Skimmed` as :data:`SKIMMED`; ``other_use``: a skimmed storage was met other
    than as a tensor's."""

    sizes: FrozenSet[int]
    placeholders: "List[weakref.ref[torch.Tensor]]" = field(default_factory=list)
    other_use: bool = False

    def all_gone(self) -> bool:
        """No placeholder is referenced any more (each was replaced) and none was used
        other than as a tensor."""
        return not self.other_use and all(ref() is None for ref in self.placeholders)


def skimmed(tensor: torch.Tensor) -> Optional[Skimmed]:
    """The :class:`Skimmed` of a placeholder tensor, None for any other tensor."""
    found = getattr(tensor, SKIMMED, None)
    return found if isinstance(found, Skimmed) else None


def whole_storage(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is exactly its storage's bytes, in order (so its content digest
    is the storage's)."""
    return (tensor.is_contiguous() and tensor.storage_offset() == 0
            and tensor.numel() * tensor.element_size() == tensor.untyped_storage().nbytes())
