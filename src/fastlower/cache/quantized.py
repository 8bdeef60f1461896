"""torchao's HQQ quantization of a weight, remembered by the weight's bytes.

``export_llm``'s ``8da4w`` source transform (before any export) quantizes every linear
weight with torchao's ``_choose_qparams_and_quantize_scale_only_hqq``: 20 passes over the
whole tensor, 59 s of a 143 s ``export_llm`` at Llama-3.2-1B's shape with two layers
(benchmarks/README.md, "Production size"), paid again on every re-export. The function is
pure: its result is a function of the weight's values and dtype and shape, its arguments,
and the code that runs (torch, torchao, the CPU kernels torch picked). With a cache folder
and fastlower routing ExecuTorch's entry points (``fastlower run``, ``fastlower.patch``),
its result is stored under a key of all of those and read back on the next call with the
same inputs: the same tensors, bit for bit.

The premise and its guards:

* no randomness: ``stochastic=True`` draws random numbers, so it always runs;
* only a plain CPU tensor (or ``nn.Parameter``: a model's weight) of a floating dtype is
  keyed (a subclass, fake or meta tensor runs the function); ``requires_grad`` is not
  read: the function runs under ``torch.no_grad``, its outputs never require grad;
* the key holds every value the function reads: the weight's bytes (xxh3-128), dtype and
  shape, ``block_size``, ``qmin``, ``qmax``, ``iters``, ``early_stop_tol``; and what
  computes it: torch's and torchao's versions, the function's source, torch's CPU
  capability (its vector kernels' summation order) and thread count;
* an entry is authenticated (the folder's keyed MAC, ``cache.trust``) before a byte of it
  is decoded; its header and lengths are checked against the key's shapes; anything
  wrong is a miss that drops the entry, with one warning;
* ``FASTLOWER_CACHE_VERIFY=1`` runs the function on a hit too and raises
  :class:`~.errors.QuantizationCacheVerificationError` on any difference.

The values stored are ``qdata`` (in ``[qmin, qmax]``, kept as int8 when that range fits,
widened back to the int32 torchao returns) and ``scale``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import json
import logging
import struct
import threading
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import xxhash

from ..in_process import hqq
from ..preprocess.folder import tell_once
from ..preprocess.keys import content_digest
from . import access
from .configuration import LoweringCacheSettings, resolve
from .entry import ChunkReader
from .errors import QuantizationCacheVerificationError
from .store import LoweringStore
from .trust.seal import SIZE as MAC_SIZE

__all__ = ["choose_qparams_hqq", "counts", "REFERENCE_MODULE", "REFERENCE_NAME"]

log = logging.getLogger("fastlower.cache")

_COUNTS = {"hit": 0, "stored": 0, "ran": 0}  # this process's, under _LOCK
_LOCK = threading.Lock()


def counts() -> dict:
    """This process's quantized weights read from the cache ("hit"), computed and stored
    ("stored"), computed and not stored ("ran": no folder, not keyable, not storable)."""
    with _LOCK:
        return dict(_COUNTS)


def _count(what: str) -> None:
    with _LOCK:
        _COUNTS[what] += 1

REFERENCE_MODULE = "torchao.quantization.quant_primitives"
REFERENCE_NAME = "_choose_qparams_and_quantize_scale_only_hqq"
PURPOSE = "quantized"
PREFIX = "quantized:"
TAG = "quantized"
FORMAT = 1
_MAGIC = b"FLQ\x01"
_MAX_HEADER = 4096
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
MIN_ELEMENTS = 1 << 16  # smaller weights cost less to quantize than to look up


def _reference() -> Callable[..., Tuple[torch.Tensor, torch.Tensor]]:
    from ..in_process.dispatch import reference_of

    return reference_of(REFERENCE_NAME)


@functools.lru_cache(maxsize=None)
def _code_identity() -> str:
    """What computes the result: versions, the function's source, CPU kernels."""
    try:
        torchao = version("torchao")
    except PackageNotFoundError:
        torchao = "unknown"
    source = inspect.getsource(_reference())
    return (f"format={FORMAT};torch={torch.__version__};torchao={torchao};"
            f"source={hashlib.sha256(source.encode()).hexdigest()};"
            f"cpu={torch.backends.cpu.get_cpu_capability()}")


def _keyable(hp_tensor: Any, block_size: Any, qmin: Any, qmax: Any, stochastic: Any) -> bool:
    return (type(hp_tensor) in (torch.Tensor, torch.nn.Parameter)
            and hp_tensor.device.type == "cpu" and hp_tensor.layout == torch.strided
            and hp_tensor.dtype in _FLOATS and hp_tensor.numel() >= MIN_ELEMENTS
            and hp_tensor.ndim == 2 and stochastic is False
            and isinstance(block_size, (list, tuple)) and len(block_size) == 2
            and all(type(b) is int for b in block_size)
            and type(qmin) is int and type(qmax) is int)


def cache_key(hp_tensor: torch.Tensor, block_size: Sequence[int], qmin: int, qmax: int,
              iters: Any, early_stop_tol: Any) -> str:
    text = (f"{_code_identity()};threads={torch.get_num_threads()};"
            f"dtype={hp_tensor.dtype};shape={tuple(hp_tensor.shape)};"
            f"block={tuple(block_size)};q=[{qmin},{qmax}];iters={iters!r};"
            f"tol={early_stop_tol!r};values={content_digest(hp_tensor)}")
    return PREFIX + xxhash.xxh3_128_hexdigest(text.encode())


def _stored_dtype(qmin: int, qmax: int) -> torch.dtype:
    return torch.int8 if -128 <= qmin and qmax <= 127 else torch.int32


def _expected(hp_tensor: torch.Tensor, block_size: Sequence[int], qmin: int,
              qmax: int) -> List[Tuple[torch.dtype, Tuple[int, ...]]]:
    """The stored tensors' dtypes and shapes, known from the key's inputs alone."""
    n, k = hp_tensor.shape
    groups = k // block_size[1] if block_size[1] > 0 else -1
    return [(_stored_dtype(qmin, qmax), (n, k)), (hp_tensor.dtype, (n, groups))]


def encode(key: str, seal: Any, qdata: torch.Tensor, scale: torch.Tensor,
           stored: torch.dtype) -> bytes:
    """An entry: magic, header, the tensors' bytes, the MAC over all of it."""
    tensors = [qdata.to(stored).contiguous(), scale.contiguous()]
    header = json.dumps({"key": key, "tensors": [[str(t.dtype), list(t.shape)]
                                                 for t in tensors]}).encode()
    body = io.BytesIO()
    body.write(_MAGIC + struct.pack("<I", len(header)) + header)
    for t in tensors:
        body.write(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    data = body.getvalue()
    seal.update(data)
    return data + seal.digest()


def decode(data: bytes, key: str, seal: Any,
           expected: List[Tuple[torch.dtype, Tuple[int, ...]]]) -> List[torch.Tensor]:
    """The entry's tensors; ``ValueError`` for anything but an authentic entry of ``key``
    holding tensors of the expected dtypes and shapes."""
    if len(data) < len(_MAGIC) + 4 + MAC_SIZE:
        raise ValueError("shorter than an entry")
    body, tag = memoryview(data)[:-MAC_SIZE], data[-MAC_SIZE:]
    seal.update(body)
    if not seal.matches(tag):  # nothing is decoded before this
        raise ValueError("the MAC does not match")
    if bytes(body[:len(_MAGIC)]) != _MAGIC:
        raise ValueError("not a quantized-weight entry")
    (size,) = struct.unpack("<I", body[len(_MAGIC):len(_MAGIC) + 4])
    start = len(_MAGIC) + 4 + size
    if size > _MAX_HEADER or start > len(body):
        raise ValueError("header length out of range")
    header = json.loads(bytes(body[len(_MAGIC) + 4:start]))
    wanted = [[str(d), list(s)] for d, s in expected]
    if header.get("key") != key or header.get("tensors") != wanted:
        raise ValueError("the header does not match the key")
    out = []
    for dtype, shape in expected:
        count = int(torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
        if start + count > len(body):
            raise ValueError("a tensor runs past the end")
        chunk = bytearray(body[start:start + count])
        out.append(torch.frombuffer(chunk, dtype=dtype).reshape(shape) if count
                   else torch.empty(shape, dtype=dtype))
        start += count
    if start != len(body):
        raise ValueError("bytes after the last tensor")
    return out


def _read(store: LoweringStore, key: str, expected: List[Tuple[torch.dtype, Tuple[int, ...]]]
          ) -> Optional[List[torch.Tensor]]:
    try:
        stream = store.open(key)
        if stream is None:
            return None
        with stream:
            data = stream.read()
        return decode(data, key, store.folder.seal(PURPOSE, key), expected)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # damaged, forged, unreadable: a miss, dropped
        tell_once(store.directory, "damaged",
                  f"fastlower: a damaged quantized-weight cache entry in {store.directory} was "
                  f"treated as a miss and dropped ({key}: {exc})", stacklevel=4)
        store.drop(key)
        return None


def _write(store: LoweringStore, key: str, qdata: torch.Tensor, scale: torch.Tensor,
           stored: torch.dtype) -> bool:
    if store.read_only:
        return False
    try:
        data = encode(key, store.folder.seal(PURPOSE, key), qdata, scale, stored)
        return store.put(key, ChunkReader([data]), tag=TAG)  # the folder's size rules
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # a full disk, a locked folder: the result stands
        log.debug("quantized weight %s not stored: %r", key, exc)
        return False


def _verified(settings: LoweringCacheSettings, key: str, found: List[torch.Tensor],
              fresh: Tuple[torch.Tensor, torch.Tensor]) -> None:
    differs = hqq.same_bits((found[0].to(torch.int32), found[1]), fresh)
    if differs is not None:  # "qdata" or "scale"
        raise QuantizationCacheVerificationError(differs, key, str(settings.directory))


def _storable(qdata: torch.Tensor, scale: torch.Tensor, qmin: int, qmax: int,
              expected: List[Tuple[torch.dtype, Tuple[int, ...]]]) -> bool:
    """torchao's result has the shapes the key promises and ``qdata`` lies in
    ``[qmin, qmax]`` (so the int8 it is kept as holds it exactly)."""
    if [(qdata.dtype, tuple(qdata.shape)), (scale.dtype, tuple(scale.shape))] != [
            (torch.int32, expected[0][1]), expected[1]]:
        return False
    low, high = torch.aminmax(qdata) if qdata.numel() else (qmin, qmax)
    return qmin <= int(low) and int(high) <= qmax


def choose_qparams_hqq(hp_tensor: Any, block_size: Any, qmin: Any, qmax: Any, *,
                       iters: int = 20, stochastic: bool = False,
                       early_stop_tol: float = 1e-5) -> Tuple[torch.Tensor, torch.Tensor]:
    """torchao's ``_choose_qparams_and_quantize_scale_only_hqq``, served from the cache
    folder when these inputs were quantized before (see the module docstring)."""
    reference = _reference()

    def run() -> Tuple[torch.Tensor, torch.Tensor]:  # torchao's bits, natively where covered
        return hqq.compute(reference, hp_tensor, block_size, qmin, qmax, iters=iters,
                           stochastic=stochastic, early_stop_tol=early_stop_tol)

    settings = resolve()
    if settings.directory is None or not _keyable(hp_tensor, block_size, qmin, qmax,
                                                  stochastic):
        _count("ran")
        return run()
    store = access.open_store(settings)
    if store is None:
        _count("ran")
        return run()
    try:
        key = cache_key(hp_tensor, block_size, qmin, qmax, iters, early_stop_tol)
        expected = _expected(hp_tensor, block_size, qmin, qmax)
        found = _read(store, key, expected)
        if found is not None:
            _count("hit")
            log.info("quantized weight %s: read from the cache", tuple(hp_tensor.shape))
            if settings.verify:
                _verified(settings, key, found, run())
            return found[0].to(torch.int32), found[1]
        qdata, scale = run()
        stored = (_storable(qdata, scale, qmin, qmax, expected)
                  and _write(store, key, qdata, scale, expected[0][0]))
        _count("stored" if stored else "ran")
        return qdata, scale
    finally:
        store.close()
