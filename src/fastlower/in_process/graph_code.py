"""A graph module's generated Python compiled once per source text while fastlower lowers.

Each ``GraphModule.recompile()`` turns the graph into Python source and compiles it
(``torch.fx.graph_module._exec_with_source``). The edge stage's retraces and passes
recompile the same graph again and again: at 6 layers of ``export_llm``'s program 431 of
the process's 629 compiles were of a source compiled before (0.9 of its 1.5 s), and a
compile costs in proportion to the graph.

The premise: ``compile(src, filename, "exec", dont_inherit=True)`` is a function of the
source and the file name alone, and the name is written only into ``co_filename``, of the
module's code object and of every code object among its constants. So a code object
compiled from the same text under another name, with ``co_filename`` replaced throughout
(``CodeType.replace``), is field for field what ``compile`` would give. torch's own steps
run as before: the loader's new key and ``linecache`` entry, then ``exec`` of the code in
the caller's globals. One difference: a compile-time ``SyntaxWarning`` (torch.fx never
generates code that raises one) is shown at the first compile of a text, not again at each.

The patch: ``torch.fx.graph_module._exec_with_source``, bound by the first
:func:`compiled_once` block and kept until :func:`uninstall`, runs torch's code unless the
calling thread or asyncio task is inside such a block and ``FASTLOWER_GRAPH_CODE`` is
``once`` (the default) or ``verify`` (each remembered code also compiled and compared,
:class:`GraphCodeVerificationError` at a difference); ``each`` is torch's way throughout.
It is bound only over the function torch 2.13 ships (checked by the names it reads). One
memo per outermost block (the last :data:`_ENTRIES` sources, at most :data:`_CHARS`
characters), dropped when the block ends.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from types import CodeType, ModuleType
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from .. import settings
from .scoped_patch import ScopedMethodPatch

__all__ = ["GraphCodeVerificationError", "compiled_once", "counts", "fields", "installed",
           "uninstall"]

_ENTRIES = 64
_CHARS = 64 << 20
# what torch's ``_exec_with_source`` reads: the loader's cache, then exec(compile(...))
_TORCH_NAMES = ("_loader", "cache", "exec", "compile")

_MEMO: ContextVar[Optional["_Memo"]] = ContextVar("fastlower_graph_code", default=None)
_counts = {"remembered": 0, "compiled": 0}  # statistics only (see counts)


class GraphCodeVerificationError(AssertionError):
    """``FASTLOWER_GRAPH_CODE=verify``: a remembered code object, renamed, differs from what
    ``compile`` gave for the same source and name."""

    def __init__(self, filename: str) -> None:
        super().__init__(f"the code remembered for the source of {filename} differs from "
                         "compile()'s")
        self.filename = filename


def fields(code: CodeType) -> Tuple[Any, ...]:
    """Every field of ``code`` that ``compile`` writes, its constants' code objects
    compared the same way (code objects' own ``==`` ignores ``co_filename``)."""
    consts = tuple(fields(c) if isinstance(c, CodeType) else (type(c), c)
                   for c in code.co_consts)
    return (code.co_filename, code.co_name, code.co_qualname, code.co_firstlineno,
            code.co_code, code.co_linetable, code.co_exceptiontable, code.co_names,
            code.co_varnames, code.co_freevars, code.co_cellvars, code.co_flags,
            code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
            code.co_stacksize, code.co_nlocals, consts)


def _renamed(code: CodeType, filename: str) -> CodeType:
    """``code`` with ``co_filename`` set to ``filename``, in its nested code objects too."""
    consts = tuple(_renamed(c, filename) if isinstance(c, CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


class _Memo:
    """The last sources compiled in one block and their code (least recently used out)."""

    def __init__(self, verify: bool) -> None:
        self._verify = verify
        self._codes: "OrderedDict[str, CodeType]" = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()  # a context copied into another thread shares it

    def code(self, src: str, filename: str) -> CodeType:
        with self._lock:
            return self._code(src, filename)

    def _code(self, src: str, filename: str) -> CodeType:
        known = self._codes.get(src)
        if known is None:
            _counts["compiled"] += 1
            code = compile(src, filename, "exec", dont_inherit=True)
            self._remember(src, code)
            return code
        _counts["remembered"] += 1
        self._codes.move_to_end(src)
        code = _renamed(known, filename)
        if self._verify and fields(code) != fields(
                compile(src, filename, "exec", dont_inherit=True)):
            raise GraphCodeVerificationError(filename)
        return code

    def _remember(self, src: str, code: CodeType) -> None:
        if len(src) > _CHARS:
            return
        self._codes[src] = code
        self._chars += len(src)
        while len(self._codes) > _ENTRIES or self._chars > _CHARS:
            old, _ = self._codes.popitem(last=False)
            self._chars -= len(old)


def _graph_module() -> ModuleType:
    import torch.fx.graph_module

    return torch.fx.graph_module


def _compiling_once(original: Callable[..., None]) -> Callable[..., None]:
    """torch's ``_exec_with_source`` taking the code from the block's memo inside a block
    (the same steps otherwise), ``original`` outside one or over another torch's function."""
    if getattr(getattr(original, "__code__", None), "co_names", None) != _TORCH_NAMES:
        return original
    loader = _graph_module()._loader

    def _exec_with_source(src: str, globals: Dict[str, Any],
                          co_fields: Optional[Dict[str, Any]] = None) -> None:
        memo = _MEMO.get()
        if memo is None:
            original(src, globals, co_fields)
            return
        key = loader.cache(src, globals, co_fields)
        exec(memo.code(src, key), globals)

    return functools.wraps(original)(_exec_with_source)


_PATCH = ScopedMethodPatch(_graph_module, "_exec_with_source", _compiling_once)
installed = _PATCH.installed  # whether the patch is bound now
# puts torch's function back (a binding someone else made after fastlower's stays); the
# next :func:`compiled_once` block binds the patch again
uninstall = _PATCH.uninstall


def counts() -> Dict[str, int]:
    """Sources compiled and code objects remembered (this process; a statistic, unlocked)."""
    return dict(_counts)


@contextmanager
def compiled_once() -> Iterator[None]:
    """Inside the block, in this thread or task, a source compiled before in the block is
    not compiled again (see the module); a nested block shares its outer block's memo."""
    mode = settings.choice(settings.GRAPH_CODE)
    if mode == "each" or _MEMO.get() is not None:
        yield
        return
    with _PATCH.active(_MEMO, _Memo(verify=mode == "verify")):
        yield
