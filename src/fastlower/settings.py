"""Every ``FASTLOWER_*`` environment variable fastlower reads, parsed by one rule.

This is the only module of the library that reads the environment; every other
module asks one of the typed accessors below. The library never writes
``os.environ``.

The rule, the same for every variable:

* **Read at call time.** Each accessor reads ``os.environ`` when it is called, so a
  change (``monkeypatch.setenv`` in a test, ``os.environ[...] = ...`` in a script)
  holds from the next call on. The one value read once per process is the choice
  of planning core (``FASTLOWER_FORCE_PYTHON``), taken when ``fastlower.core.plan`` is
  first imported.
* **Unset or blank is "not set".** The value is stripped of surrounding whitespace;
  an empty value means the same as an unset variable: the documented default.
* **Booleans**: ``1``, ``true``, ``yes``, ``on`` are true; ``0``, ``false``, ``no``,
  ``off`` are false (any letter case).
* **Integers**: a decimal integer (``int(value)``), at least the variable's minimum.
* **Paths**: the value as a path, ``~`` expanded.
* **Paths** (a list): absolute directories separated by ``os.pathsep`` (``:``), each
  ``~`` expanded; empty items are skipped.
* **Text**: the value as it is (a URL; the module that uses it checks its form).
* **Choices**: one of the listed words, in any letter case (returned lower-cased).
* **Anything else is an error**: :class:`SettingsError` (a ``ValueError``) naming
  the variable, its value and what it accepts, raised by the accessor, so by the
  lowering (or command) that asked for it. A bad value is never silently taken for
  the default.

=============================== ======= ======= =============================================
variable                        type    default meaning
=============================== ======= ======= =============================================
``FASTLOWER_WORKERS``           int>=1  (cores) preprocess worker processes (1: serial)
``FASTLOWER_CACHE_DIR``         path    (none)  the cache folder (preprocess + lowering cache)
``FASTLOWER_CACHE_SIZE``        int>=0  (model) the cache folder's size limit in bytes
``FASTLOWER_CACHE_VERIFY``      bool    false   re-run on every cache hit and compare
``FASTLOWER_CACHE_KEY_FILE``    path    (user's) the key that signs cache entries
``FASTLOWER_CACHE_BASE_DIR``    paths   (none)  more base directories of the lowering key
``FASTLOWER_SHARED_CACHE``      text    (none)  URL of the shared second-tier store
``FASTLOWER_SHARED_CACHE_ENDPOINT`` text (none) the S3-compatible server's URL
``FASTLOWER_SHARED_CACHE_TIMEOUT`` int>=1 30    seconds per request to the shared store
``FASTLOWER_PROGRESS``          bool    (tty)   progress bar over partitions
``FASTLOWER_START_METHOD``      choice  auto    how the worker pool starts: auto/fork/spawn
``FASTLOWER_LOWERING_CACHE``    bool    true    false: the lowering cache is off
``FASTLOWER_NATIVE_PARTITIONERS`` bool  true    false: canonical partitioners run unpatched
``FASTLOWER_VALIDATE_ALL``      bool    false   run the verifier on every program built
``FASTLOWER_FORCE_PYTHON``      bool    false   plan with the Python twin, not ``_core``
``FASTLOWER_ALLOW_UNTESTED_VERSIONS`` bool false lower with an untested torch / ExecuTorch
``FASTLOWER_EDGE_RETRACES``     choice  skip    edge stage: skip/all/verify no-op retraces
``FASTLOWER_PREPROCESS_CLASSES`` choice derive  structural classes: derive/verify/off
``FASTLOWER_NODE_HISTORY``      choice  share   ``from_node`` histories: share/copy
``FASTLOWER_FAKE_OUTPUTS``      choice  reuse   fake outputs known without a run: reuse/run/verify
``FASTLOWER_HEAP_FREEZE``       bool    true    freeze the heap for the collector per lowering
``FASTLOWER_RETRACE_QUANT_OPS`` choice  on      quant ops' fake dispatch remembered: on/off/verify
``FASTLOWER_CIA_OPS``           choice  once    torch's CIA operator table: once/each/verify
``FASTLOWER_SYM_ARITH``         choice  on      SymNode arithmetic remembered: on/off/verify
``FASTLOWER_TORCH_EXPORT``      choice  inside  the pipeline's exports' block: inside/outside
``FASTLOWER_EDGE_TRANSFORM``    choice  inside  the pipeline's edge transform: inside/outside
``FASTLOWER_GRAPH_CODE``        choice  once    graph code compiled per text: once/each/verify
=============================== ======= ======= =============================================

(The test suites' own switches, ``FASTLOWER_CONFORMANCE_IMPL``, ``FASTLOWER_FUZZ_*``,
``FASTLOWER_TEST_SRC`` and so on, are read by the tests, never by the library.)

Where a setting also has a Python option (``fastlower.preprocess.options``), the
option wins and the variable is only its fallback: the accessors return ``None``
for an unset variable whose default the caller computes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple, Union, cast

__all__ = [
    "SettingsError", "Variable", "VARIABLES", "raw", "get", "workers", "cache_dir", "cache_size",
    "cache_verify", "cache_key_file", "progress", "cache_base_dirs", "CACHE_BASE_DIR",
    "start_method", "lowering_cache", "native_partitioners", "validate_all", "force_python",
    "allow_untested_versions", "ALLOW_UNTESTED_VERSIONS", "choice", "EDGE_RETRACES",
    "preprocess_classes", "PREPROCESS_CLASSES", "NODE_HISTORY", "FAKE_OUTPUTS", "heap_freeze",
    "HEAP_FREEZE", "RETRACE_QUANT_OPS", "CIA_OPS", "SYM_ARITH", "TORCH_EXPORT", "EDGE_TRANSFORM",
    "GRAPH_CODE", "shared_cache", "shared_cache_endpoint", "shared_cache_timeout", "SHARED_CACHE",
    "SHARED_CACHE_ENDPOINT", "SHARED_CACHE_TIMEOUT", "WORKERS", "CACHE_DIR", "CACHE_SIZE",
    "CACHE_VERIFY", "CACHE_KEY_FILE", "PROGRESS", "START_METHOD", "LOWERING_CACHE",
    "NATIVE_PARTITIONERS", "VALIDATE_ALL", "FORCE_PYTHON"]

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")

WORKERS = "FASTLOWER_WORKERS"
CACHE_DIR = "FASTLOWER_CACHE_DIR"
CACHE_SIZE = "FASTLOWER_CACHE_SIZE"
CACHE_VERIFY = "FASTLOWER_CACHE_VERIFY"
CACHE_KEY_FILE = "FASTLOWER_CACHE_KEY_FILE"
CACHE_BASE_DIR = "FASTLOWER_CACHE_BASE_DIR"
PROGRESS = "FASTLOWER_PROGRESS"
START_METHOD = "FASTLOWER_START_METHOD"
LOWERING_CACHE = "FASTLOWER_LOWERING_CACHE"
NATIVE_PARTITIONERS = "FASTLOWER_NATIVE_PARTITIONERS"
VALIDATE_ALL = "FASTLOWER_VALIDATE_ALL"
FORCE_PYTHON = "FASTLOWER_FORCE_PYTHON"
ALLOW_UNTESTED_VERSIONS = "FASTLOWER_ALLOW_UNTESTED_VERSIONS"
EDGE_RETRACES = "FASTLOWER_EDGE_RETRACES"
PREPROCESS_CLASSES = "FASTLOWER_PREPROCESS_CLASSES"
NODE_HISTORY = "FASTLOWER_NODE_HISTORY"
FAKE_OUTPUTS = "FASTLOWER_FAKE_OUTPUTS"
HEAP_FREEZE = "FASTLOWER_HEAP_FREEZE"
RETRACE_QUANT_OPS = "FASTLOWER_RETRACE_QUANT_OPS"
CIA_OPS = "FASTLOWER_CIA_OPS"
SYM_ARITH = "FASTLOWER_SYM_ARITH"
TORCH_EXPORT = "FASTLOWER_TORCH_EXPORT"
EDGE_TRANSFORM = "FASTLOWER_EDGE_TRANSFORM"
GRAPH_CODE = "FASTLOWER_GRAPH_CODE"
HQQ = "FASTLOWER_HQQ"
SHARED_CACHE = "FASTLOWER_SHARED_CACHE"
SHARED_CACHE_ENDPOINT = "FASTLOWER_SHARED_CACHE_ENDPOINT"
SHARED_CACHE_TIMEOUT = "FASTLOWER_SHARED_CACHE_TIMEOUT"

START_METHODS = ("auto", "fork", "spawn")
EDGE_RETRACE_MODES = ("skip", "all", "verify")
CLASS_MODES = ("derive", "verify", "off")
NODE_HISTORY_MODES = ("share", "copy")
FAKE_OUTPUT_MODES = ("reuse", "run", "verify")
RETRACE_QUANT_OP_MODES = ("off", "on", "verify")
CIA_OPS_MODES = ("once", "each", "verify")
HQQ_MODES = ("native", "torchao", "verify")

Value = Union[bool, int, Path, str, Tuple[Path, ...], None]


class SettingsError(ValueError):
    """An environment variable's value does not parse (see the module's rule)."""

    def __init__(self, name: str, value: str, expected: str, option: str = "") -> None:
        what = f" ({option})" if option else ""
        super().__init__(f"{name}={value!r}{what}: expected {expected}")
        self.name = name
        self.value = value
        self.expected = expected


@dataclass(frozen=True)
class Variable:
    """One variable: its name, type (``bool``, ``int``, ``path`` or ``choice``), the value
    an unset variable stands for (``None``: the caller's default) and what it does; ``text``
    is taken as it is."""

    name: str
    kind: str
    default: Value
    meaning: str
    minimum: Optional[int] = None       # int only
    choices: Tuple[str, ...] = ()       # choice only
    option: str = ""                    # the Python option it stands in for, if any

    def error(self, value: str, expected: str) -> "SettingsError":
        return SettingsError(self.name, value, expected, self.option)


VARIABLES: Dict[str, Variable] = {v.name: v for v in (
    Variable(WORKERS, "int", None, "preprocess worker processes (default: usable cores)",
             minimum=1, option="preprocess workers"),
    Variable(CACHE_DIR, "path", None, "the cache folder (default: no cache; the CLI: the "
             "user's cache folder)", option="preprocess cache_dir"),
    Variable(CACHE_SIZE, "int", None, "the cache's size limit in bytes (default: 2 GiB, or "
             "4x the largest lowering entry)",
             minimum=0, option="preprocess cache_size"),
    Variable(CACHE_VERIFY, "bool", False, "re-run preprocess / lowering on every cache hit",
             option="preprocess verify"),
    Variable(CACHE_KEY_FILE, "path", None, "the file holding the key that signs cache entries "
             "(default: the user's own, generated on first use); a team sharing a cache "
             "folder shares this file", option="preprocess cache_key_file"),
    Variable(CACHE_BASE_DIR, "paths", (), "directories (besides the working directory, the "
             "script's repository and the Python prefixes) below which a path in a node's "
             "meta is keyed relative to the directory (as ccache's base_dir)"),
    Variable(PROGRESS, "bool", None, "progress bar (default: when stderr is a terminal)",
             option="preprocess progress"),
    Variable(START_METHOD, "choice", None, "how fastlower's pool starts workers (default auto)",
             choices=START_METHODS, option="preprocess start_method"),
    Variable(SHARED_CACHE, "text", None, "URL of a shared second-tier store of lowering "
             "entries (file:///path, s3://bucket/prefix); default: none",
             option="shared url"),
    Variable(SHARED_CACHE_ENDPOINT, "text", None, "the URL of an S3-compatible server for an "
             "s3:// shared store (default: AWS)", option="shared endpoint"),
    Variable(SHARED_CACHE_TIMEOUT, "int", None, "seconds one request to the shared store may "
             "take (default 30)", minimum=1, option="shared timeout"),
    Variable(LOWERING_CACHE, "bool", True, "false: the lowering cache is off"),
    Variable(NATIVE_PARTITIONERS, "bool", True, "false: accelerated() leaves the canonical "
             "partitioners alone"),
    Variable(VALIDATE_ALL, "bool", False, "run the verifier on every program fastlower builds"),
    Variable(FORCE_PYTHON, "bool", False, "plan with the pure-Python twin, not fastlower._core"),
    Variable(ALLOW_UNTESTED_VERSIONS, "bool", False, "lower with a torch or ExecuTorch outside "
             "the tested releases (one warning instead of an error)"),
    Variable(EDGE_RETRACES, "choice", "skip", "the edge stage's retraces that change nothing: "
             "skip them, run all (ExecuTorch's path), or verify (run both and compare)",
             choices=EDGE_RETRACE_MODES),
    Variable(PREPROCESS_CLASSES, "choice", "derive", "partitions of one structure: preprocess "
             "two and derive the others, verify (preprocess all and compare), or off",
             choices=CLASS_MODES),
    Variable(NODE_HISTORY, "choice", "share", "a new node's from_node history during a "
             "lowering: share its source's (equal values) or deep-copy it (torch's way)",
             choices=NODE_HISTORY_MODES),
    Variable(FAKE_OUTPUTS, "choice", "reuse", "in ExecuTorch's passes, the fake outputs of "
             "delegate calls and quantization operators: known without a run when provably "
             "equal (reuse), run (ExecuTorch's way), or verify (both, compared)",
             choices=FAKE_OUTPUT_MODES),
    Variable(HEAP_FREEZE, "bool", True, "while fastlower lowers, the objects that exist at "
             "each step's start are frozen for the cyclic collector (gc.freeze), unless the "
             "process froze objects itself, and the edge stage runs without full "
             "collections"),
    Variable(RETRACE_QUANT_OPS, "choice", "on", "torchao's quantization operators' fake "
             "dispatch, also in the edge stage's retraces: remembered when the same call "
             "in the same shape-environment state changed nothing (on), not (off), or "
             "verify (both, compared)", choices=RETRACE_QUANT_OP_MODES),
    Variable(CIA_OPS, "choice", "once", "torch's CompositeImplicitAutograd operators "
             "materialized into torch.ops once while nothing they depend on changed (once), "
             "once per namespace (each: torch's way), or verify (each skipped walk run and "
             "checked to change nothing)", choices=CIA_OPS_MODES),
    Variable(SYM_ARITH, "choice", "on", "SymNode's +, -, *, ==, <... remembered per shape "
             "environment (on), torch's way (off), or both and compared (verify)",
             choices=("on", "off", "verify")),
    Variable(TORCH_EXPORT, "choice", "inside", "the pipeline's torch.export.export and "
             "run_decompositions in fastlower's heap freeze and memos (inside), or not "
             "(outside)", choices=("inside", "outside")),
    Variable(EDGE_TRANSFORM, "choice", "inside", "the pipeline's EdgeProgramManager.transform "
             "in fastlower's lowering block (inside), or not (outside)",
             choices=("inside", "outside")),
    Variable(GRAPH_CODE, "choice", "once", "a graph module's generated Python compiled once "
             "per source text while fastlower lowers (once), at each recompile (each: torch's "
             "way), or both and compared (verify)", choices=("once", "each", "verify")),
    Variable(HQQ, "choice", "native", "torchao's HQQ weight quantization (export_llm's 8da4w) "
             "computed by fastlower's native kernels, torchao's bits (native), by torchao "
             "(torchao), or both and compared (verify)", choices=HQQ_MODES),
)}


def raw(name: str) -> Optional[str]:
    """The variable's value stripped of surrounding whitespace; ``None`` when unset or blank."""
    value = os.environ.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def parse(variable: Variable, value: str) -> Value:
    """``value`` (already stripped, not empty) read as ``variable``'s type; raises
    :class:`SettingsError` when it does not parse."""
    if variable.kind == "bool":
        word = value.lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise variable.error(value, "a boolean: " + "/".join(TRUE_WORDS)
                            + " or " + "/".join(FALSE_WORDS))
    if variable.kind == "int":
        least = "" if variable.minimum is None else f" >= {variable.minimum}"
        try:
            number = int(value)
        except ValueError:
            raise variable.error(value, f"an integer{least}") from None
        if variable.minimum is not None and number < variable.minimum:
            raise variable.error(value, f"an integer{least}")
        return number
    if variable.kind == "path":
        return _expanded(variable, value, value, "a path (a ~user that exists)")
    if variable.kind == "text":
        return value
    if variable.kind == "paths":
        expected = f"absolute directories separated by {os.pathsep!r}"
        found = tuple(_expanded(variable, value, item, expected)
                      for item in value.split(os.pathsep) if item)
        if not all(path.is_absolute() for path in found):
            raise variable.error(value, expected)
        return found
    if variable.kind == "choice":
        word = value.lower()
        if word not in variable.choices:
            raise variable.error(value, "one of " + ", ".join(variable.choices))
        return word
    raise AssertionError(f"unknown kind {variable.kind!r} of {variable.name}")


def _expanded(variable: Variable, value: str, item: str, expected: str) -> Path:
    """``item`` (of ``value``) as a path, ``~`` expanded; an unknown ``~user`` (or no home
    folder) is :class:`SettingsError`, not ``pathlib``'s ``RuntimeError``."""
    try:
        return Path(item).expanduser()
    except RuntimeError:
        raise variable.error(value, expected) from None


def get(name: str) -> Value:
    """The parsed value of the known variable ``name``, else its default."""
    variable = VARIABLES[name]
    value = raw(name)
    return variable.default if value is None else parse(variable, value)


# --------------------------------------------------------------------- typed accessors
def workers() -> Optional[int]:
    """``FASTLOWER_WORKERS`` (>= 1), or ``None``: the usable cores."""
    return cast(Optional[int], get(WORKERS))


def cache_dir() -> Optional[Path]:
    """``FASTLOWER_CACHE_DIR``, or ``None``: no folder from the environment."""
    return cast(Optional[Path], get(CACHE_DIR))


def cache_size() -> Optional[int]:
    """``FASTLOWER_CACHE_SIZE`` in bytes (>= 0), or ``None``: the default limit."""
    return cast(Optional[int], get(CACHE_SIZE))


def cache_verify() -> bool:
    """``FASTLOWER_CACHE_VERIFY``: re-run on every cache hit and compare (default false)."""
    return bool(get(CACHE_VERIFY))


def cache_key_file() -> Optional[Path]:
    """``FASTLOWER_CACHE_KEY_FILE``, or ``None``: the user's own key."""
    return cast(Optional[Path], get(CACHE_KEY_FILE))


def cache_base_dirs() -> Tuple[Path, ...]:
    """``FASTLOWER_CACHE_BASE_DIR``: more base directories of the lowering key (default none)."""
    return cast(Tuple[Path, ...], get(CACHE_BASE_DIR))


def progress() -> Optional[bool]:
    """``FASTLOWER_PROGRESS``, or ``None``: a bar only when stderr is a terminal."""
    return cast(Optional[bool], get(PROGRESS))


def start_method() -> Optional[str]:
    """``FASTLOWER_START_METHOD`` lower-cased (one of :data:`START_METHODS`), or ``None``."""
    return cast(Optional[str], get(START_METHOD))


def lowering_cache() -> bool:
    """``FASTLOWER_LOWERING_CACHE``: false turns the lowering cache off (default true)."""
    return bool(get(LOWERING_CACHE))


def native_partitioners() -> bool:
    """``FASTLOWER_NATIVE_PARTITIONERS``: false keeps ``accelerated()`` from patching the
    canonical partitioners (default true)."""
    return bool(get(NATIVE_PARTITIONERS))


def validate_all() -> bool:
    """``FASTLOWER_VALIDATE_ALL``: the verifier runs on every program built (default false)."""
    return bool(get(VALIDATE_ALL))


def force_python() -> bool:
    """``FASTLOWER_FORCE_PYTHON``: plan with the Python twin, not ``fastlower._core``
    (default false)."""
    return bool(get(FORCE_PYTHON))


def allow_untested_versions() -> bool:
    """``FASTLOWER_ALLOW_UNTESTED_VERSIONS``: an untested torch / ExecuTorch warns instead of
    failing the lowering (default false)."""
    return bool(get(ALLOW_UNTESTED_VERSIONS))


def preprocess_classes() -> str:
    """``FASTLOWER_PREPROCESS_CLASSES``: ``derive`` (default), ``verify`` or ``off``."""
    return cast(str, get(PREPROCESS_CLASSES))


def choice(name: str) -> str:
    """A ``choice`` variable's word (lower-cased), or its default."""
    return cast(str, get(name))


def heap_freeze() -> bool:
    """``FASTLOWER_HEAP_FREEZE``: True (default) or False."""
    return cast(bool, get(HEAP_FREEZE))


def shared_cache() -> Optional[str]:
    """``FASTLOWER_SHARED_CACHE``: the shared store's URL, or ``None``: no shared store."""
    return cast(Optional[str], get(SHARED_CACHE))


def shared_cache_endpoint() -> Optional[str]:
    """``FASTLOWER_SHARED_CACHE_ENDPOINT``: an S3-compatible server's URL, or ``None``."""
    return cast(Optional[str], get(SHARED_CACHE_ENDPOINT))


def shared_cache_timeout() -> Optional[int]:
    """``FASTLOWER_SHARED_CACHE_TIMEOUT`` in seconds (>= 1), or ``None``: the default."""
    return cast(Optional[int], get(SHARED_CACHE_TIMEOUT))
