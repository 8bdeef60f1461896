"""Run a call with room on CPython's frame stack, so its hot loops never cross a stack chunk.

CPython 3.11 keeps the frames of Python functions on per-thread chunks of 16 KiB and
frees a chunk as soon as the frame that opened it returns. A loop deep in a call tree
whose callee's frame lands exactly at a chunk's end then maps and unmaps a fresh chunk
on every call: two system calls and a page fault each time (python/cpython#142183; 3.13
and 3.14 cache one chunk, 3.11 never will). Whether a given loop lands there depends on
how deep the caller's stack already is, so the same program runs at one speed under
one caller and at another under the next.

ExecuTorch's edge stage and XNNPACK's ``preprocess`` are such call trees (their
``torch.fx`` interpreters loop over nodes deep in the stack). In ``export_llm``'s tiny
config, XNNPACK's 24 ``preprocess`` calls took 34.7 s with 1.05 million page faults
where fastlower called them, and 22.6 s with 88 thousand where ExecuTorch did
(``benchmarks/README.md``). :func:`with_stack_room` runs a call in a frame that opens a
1 MiB chunk of its own and fills just over half of it: the call's own frames, ~1000
deep, fit in the rest, whatever the caller's depth, and no chunk is mapped until the call
returns. Only the pages the frames touch are ever written. Nothing global changes: the
stack is the calling thread's own.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, Dict, Tuple, TypeVar

T = TypeVar("T")

# Stack slots (8 bytes each) of the frame that opens the chunk. CPython opens a chunk of
# the smallest power of two >= 16 KiB that holds the frame plus 1000 slots, so 72,000
# slots get a 1 MiB chunk (131,072 slots) and leave ~59,000 slots (~470 KiB) after them;
# as 59,000 < 72,000, a nested call opens a chunk of its own too.
ROOM_SLOTS = 72_000


def _call(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


# the same code with an evaluation stack of ROOM_SLOTS: CPython sizes the frame from
# co_stacksize and leaves the unused part of it untouched
_call_with_room = types.FunctionType(_call.__code__.replace(co_stacksize=ROOM_SLOTS),
                                     _call.__globals__, "_call_with_room")


def with_stack_room(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, its frames in a stack chunk of their own (see the module)."""
    return _call_with_room(fn, args, kwargs)


def stack_room(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` made to run :func:`with_stack_room` (same name, docstring and signature)."""

    @functools.wraps(fn)
    def roomy(*args: Any, **kwargs: Any) -> T:
        return _call_with_room(fn, args, kwargs)

    return roomy
