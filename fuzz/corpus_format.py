"""The byte format the core fuzzer decodes, and its encoder for seed inputs.

The harness reads everything through ``atheris.FuzzedDataProvider``, one byte at
a time with ``ConsumeIntInRange(0, 255)`` (which takes bytes from the *end* of the
input, 0 once it is exhausted).  Bytes form LEB128 varints (zigzag for signed
values), varints form lists, texts and graphs.  ``Writer`` produces the bytes
that decode to given values, so seeds can be made from real encoded graphs
(``make_corpus.py``); ``tests/test_core_fuzz.py`` checks the round trip.
"""

from __future__ import annotations

from typing import Iterable, List, Sequence

# bounds keep each input cheap (the twin runs on every one, for the comparison)
MAX_NODES = 600
MAX_LIST = 600
MAX_INPUTS = 64
MAX_OUTPUTS = 64
MAX_TAGS = 64
MAX_TEXT = 128
MAX_OPS = 48
# a few characters that matter to the name allocator get one-byte codes
ALPHABET = "abcdefgxyz_0123456789ABXZ.-\n é٣\u212a\u0130"

# entry points
GROUP_BY_TAG, CONTRACT, FIRST_DIFFERENCE, NAMES, SIMULATOR, PLAN_GRAPH = range(6)
N_ENTRY_POINTS = 6

# simulator operations (after construction)
(OP_ORDER, OP_RENUMBER, OP_MEMBERS, OP_DUPLICATE, OP_RETAG, OP_FIND_CYCLE, OP_FUSE, OP_LEGALIZE,
 OP_INSERT_DELEGATE, OP_MAX_DH, OP_READ_VIEWS, OP_PLAN_FUSE_ALL, OP_PLAN_DUPLICATE) = range(13)
N_SIM_OPS = 13

# graph modes
GRAPH_RAW, GRAPH_CONSISTENT = 0, 1


class Reader:
    """Values from a ``FuzzedDataProvider`` (or any object with ``ConsumeIntInRange``)."""

    def __init__(self, fdp) -> None:
        self.fdp = fdp

    def byte(self) -> int:
        return self.fdp.ConsumeIntInRange(0, 255)

    def uint(self) -> int:
        value, shift = 0, 0
        for _ in range(10):
            b = self.byte()
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        return value

    def sint(self) -> int:
        u = self.uint()
        return (u >> 1) ^ -(u & 1)

    def length(self, cap: int) -> int:
        return self.uint() % (cap + 1)

    def sints(self, cap: int = MAX_LIST) -> List[int]:
        return [self.sint() for _ in range(self.length(cap))]

    def text(self) -> str:
        chars = []
        for _ in range(self.length(MAX_TEXT)):
            c = self.uint()
            chars.append(ALPHABET[c] if c < len(ALPHABET) else chr((c - len(ALPHABET)) % 0x110000))
        return "".join(chars)

    def texts(self, cap: int) -> List[str]:
        return [self.text() for _ in range(self.length(cap))]


class Writer:
    """The inverse of ``Reader``: ``bytes()`` decodes to the values written, in order."""

    def __init__(self) -> None:
        self.stream: List[int] = []

    def byte(self, b: int) -> None:
        self.stream.append(b & 0xFF)

    def uint(self, value: int) -> None:
        if value < 0:
            raise ValueError("uint of a negative value")
        while True:
            b = value & 0x7F
            value >>= 7
            if value:
                self.byte(b | 0x80)
            else:
                self.byte(b)
                return

    def sint(self, value: int) -> None:
        self.uint(value * 2 if value >= 0 else -value * 2 - 1)

    def length(self, n: int, cap: int) -> None:
        if n > cap:
            raise ValueError(f"length {n} above the cap {cap}")
        self.uint(n)

    def sints(self, values: Sequence[int], cap: int = MAX_LIST) -> None:
        self.length(len(values), cap)
        for v in values:
            self.sint(v)

    def text(self, s: str) -> None:
        self.length(len(s), MAX_TEXT)
        for ch in s:
            i = ALPHABET.find(ch)
            self.uint(i if i >= 0 else ord(ch) + len(ALPHABET))

    def texts(self, values: Iterable[str], cap: int) -> None:
        values = list(values)
        self.length(len(values), cap)
        for s in values:
            self.text(s)

    def bytes(self) -> bytes:
        # the provider consumes integers from the end of the data
        return bytes(reversed(self.stream))
