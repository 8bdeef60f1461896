"""The lowering cache's exceptions: two internal signals and one error for callers."""

from __future__ import annotations

from ..preprocess.failures import CacheVerificationError


class Uncacheable(Exception):
    """An input (or a result) has no canonical form: the call is neither looked up nor
    stored. The message says what and where; it is logged once, never raised to callers."""


class DamagedEntry(Exception):
    """A cache entry that cannot be trusted (truncated, garbled, foreign, stale)."""


class LoweringCacheVerificationError(CacheVerificationError):
    """Verify mode: a cached lowering differs from a fresh one.

    ``difference`` names the first difference (method, node, delegate, field);
    ``key`` is the entry's key. Raised instead of returning either result.
    """

    def __init__(self, difference: str, key: str, cache_dir: str):
        super().__init__(
            f"the cached to_edge_transform_and_lower result differs from a fresh lowering: "
            f"{difference} (key {key}, cache {cache_dir}); a partitioner, pass or backend is "
            "not deterministic, or the key misses an input")
        self.difference = difference
        self.key = key
        self.cache_dir = cache_dir

    def __reduce__(self):
        return _rebuild, (self.difference, self.key, self.cache_dir)


def _rebuild(difference: str, key: str, cache_dir: str) -> LoweringCacheVerificationError:
    return LoweringCacheVerificationError(difference, key, cache_dir)


class ExecutionProgramsUnavailable(RuntimeError):
    """``exported_program()`` of a ``to_executorch()`` served from the lowering cache could
    not be made again: the ``EdgeProgramManager`` changed in place since, or a new run
    gave another ``.pte`` (the message says which)."""


class QuantizationCacheVerificationError(CacheVerificationError):
    """Verify mode: a weight's cached torchao quantization differs from a fresh one.

    ``difference`` names the tensor (``qdata`` or ``scale``); ``key`` is the entry's key.
    """

    def __init__(self, difference: str, key: str, cache_dir: str):
        super().__init__(
            f"the cached quantization of a weight differs from a fresh one: its {difference} "
            f"(key {key}, cache {cache_dir}); torchao's function is not deterministic here, "
            "or the key misses an input")
        self.difference = difference
        self.key = key
        self.cache_dir = cache_dir

    def __reduce__(self):
        return _rebuild_quantized, (self.difference, self.key, self.cache_dir)


def _rebuild_quantized(difference: str, key: str, cache_dir: str
                       ) -> QuantizationCacheVerificationError:
    return QuantizationCacheVerificationError(difference, key, cache_dir)
