"""torch's arithmetic on symbolic sizes remembered while fastlower lowers.

A tensor with symbolic sizes (``export_llm``'s dynamic sequence length, a KV cache's
``item()``) is remade thousands of times in the edge stage's retraces and passes: each
``FunctionalTensor`` wrapper and each output of torch's fake-tensor cache. Each time, torch's
C++ computes its numel and contiguity over its ``SymInt`` sizes and strides, one Python call
on ``torch.fx.experimental.sym_node.SymNode`` per ``*``, ``+``, ``==``... and each builds
its sympy expression again: the same few hundred questions asked hundreds of thousands of
times (6 layers of ``export_llm``'s program: 1,346 distinct, 523,970 repeated).

The premise: with no tracing mode active, translation validation off, torch's structured
trace and ``sym_node`` debug log off, ``SymNode``'s ``add``, ``sub``, ``mul``, ``eq``, ``ne``,
``lt``, ``le``, ``gt`` and ``ge`` on two plain ``SymNode`` objects of int or bool type
return a new ``SymNode`` whose every field is a function of what the key holds and nothing
else: the method, both operands' expressions as read now (``.expr``, after the shape
environment's replacements; sympy's ``==`` is structural, and the key adds each top-level
type so that ``1`` and ``Integer(1)`` differ), their Python types, hints (with their types)
and optimized-summation flags, and the shape environment (the result's, and the memo's
owner). None of them reads the shape environment's ranges, guards or config, or writes
anything but sympy's own cache: ``mod`` (which reads value ranges) and every other method
run torch's code. A remembered answer is a new ``SymNode`` built from the remembered fields,
as torch builds it (no constant; no FX node, which exists only with translation validation).

The patch: the nine ``SymNode._<method>`` functions, bound by the first
:func:`remembered` block and kept until :func:`uninstall`, run torch's code unless the
calling thread or asyncio task is inside such a block and ``FASTLOWER_SYM_ARITH`` is ``on``
(the default) or ``verify`` (each answer also computed by torch and compared,
:class:`SymArithVerificationError` at a difference); ``off`` is torch's way throughout. One
memo per shape environment, dropped with it.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterator, Tuple

from .. import settings
from .scoped_patch import ScopedMethodPatch

__all__ = ["METHODS", "SymArithVerificationError", "counts", "installed", "remembered",
           "uninstall"]

METHODS = ("add", "sub", "mul", "eq", "ne", "lt", "le", "gt", "ge")
_PLAIN = (int, bool)  # the Python types taken, for operands and hints alike
_LIMIT = 1 << 20  # entries per shape environment before its memo starts again

_MODE: ContextVar[str] = ContextVar("fastlower_sym_arith", default="off")
_memos: "weakref.WeakKeyDictionary[Any, Dict[Tuple[Any, ...], Tuple[Any, ...]]]" = \
    weakref.WeakKeyDictionary()
_lock = threading.Lock()
_counts = {"answered": 0, "computed": 0}  # statistics only (see counts)


class SymArithVerificationError(AssertionError):
    """``FASTLOWER_SYM_ARITH=verify``: torch's ``SymNode`` arithmetic gave what the memo did
    not."""

    def __init__(self, method: str, expected: Any, remembered: Any) -> None:
        super().__init__(f"SymNode.{method}: torch gave {expected!r}, fastlower remembered "
                         f"{remembered!r}; set FASTLOWER_SYM_ARITH=off and please report it")


class _Torch:
    """torch's names the patch reads at every call, looked up once."""

    def __init__(self) -> None:
        import torch._logging._internal as torch_logging
        from torch.fx.experimental import sym_node
        from torch.fx.experimental.proxy_tensor import get_proxy_mode

        self.sym_node = sym_node.SymNode
        self.no_hint = sym_node._NO_HINT
        self.log = sym_node.sym_node_log
        self.logging = torch_logging
        self.get_proxy_mode = get_proxy_mode


@functools.lru_cache(maxsize=None)
def _torch() -> _Torch:
    return _Torch()


def _sym_node_class() -> type:
    return _torch().sym_node


def _fields(node: Any) -> Tuple[Any, ...]:
    """What a result is: its expression (with its type), Python type, hint (with its type),
    optimized-summation flag, constant and FX node."""
    return (type(node._expr), node._expr, node.pytype, type(node._hint), node._hint,
            node._optimized_summation, node.constant, node.fx_node)


def _memo_of(env: Any) -> Dict[Tuple[Any, ...], Tuple[Any, ...]]:
    memo = _memos.get(env)
    if memo is None or len(memo) > _LIMIT:
        with _lock:
            memo = _memos[env] = {}
    return memo


_HINTS = (int, bool, type(None))


def _key(t: _Torch, method: str, node: Any, other: Any) -> Any:
    """The memo's key for ``node.<method>(other)``, or None when torch's code must run."""
    env = node.shape_env
    if (type(node) is not t.sym_node or type(other) is not t.sym_node
            or env is None or env._translation_validation_enabled
            or node.pytype not in _PLAIN or other.pytype not in _PLAIN
            or type(node._hint) not in _HINTS or type(other._hint) not in _HINTS
            or t.logging.GET_DTRACE_STRUCTURED or t.get_proxy_mode() is not None
            or t.log.isEnabledFor(logging.DEBUG)):
        return None
    a, b = node.expr, other.expr
    return (method, type(a), a, type(b), b, node.pytype, other.pytype, type(node._hint),
            node._hint, type(other._hint), other._hint, node._optimized_summation,
            other._optimized_summation)


def _rebuilt(t: _Torch, node: Any, fields: Tuple[Any, ...]) -> Any:
    _, expr, pytype, _, hint, optimized, _, _ = fields
    return t.sym_node(expr, node.shape_env, pytype, t.no_hint if hint is None else hint,
                      optimized_summation=optimized)


def _remembering(method: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def replace(original: Callable[..., Any]) -> Callable[..., Any]:
        def impl(self: Any, other: Any) -> Any:
            mode = _MODE.get()
            t = _torch()
            key = None if mode == "off" else _key(t, method, self, other)
            if key is None:
                return original(self, other)
            memo = _memo_of(self.shape_env)
            fields = memo.get(key)
            if fields is None:
                result = original(self, other)
                memo[key] = _fields(result)
                _counts["computed"] += 1
                return result
            _counts["answered"] += 1
            result = _rebuilt(t, self, fields)
            if mode == "verify":
                expected = original(self, other)
                if _fields(expected) != _fields(result):
                    raise SymArithVerificationError(method, expected, result)
            return result

        return functools.wraps(original)(impl)

    return replace


_PATCHES = tuple(ScopedMethodPatch(_sym_node_class, f"_{method}",
                                   _remembering(method)) for method in METHODS)


def installed() -> bool:
    """Whether the patch is bound now."""
    return all(patch.installed() for patch in _PATCHES)


def uninstall() -> None:
    """Puts torch's functions back (a binding someone else made after fastlower's stays)
    and drops the memos; the next :func:`remembered` block binds the patch again."""
    for patch in _PATCHES:
        patch.uninstall()
    with _lock:
        _memos.clear()


def counts() -> Dict[str, int]:
    """How many results were answered from the memo and how many computed by torch and
    remembered (this process; a statistic, unlocked: threads racing may lose a count)."""
    return dict(_counts)


@contextmanager
def remembered() -> Iterator[None]:
    """Inside the block, in this thread or task, the arithmetic above is remembered (see the
    module); nested blocks are fine."""
    mode = settings.choice(settings.SYM_ARITH)
    if mode == "off":
        yield
        return
    for patch in _PATCHES:
        patch.install()
    token = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(token)
