"""The key of one ``to_edge_transform_and_lower`` call: everything that can change its result.

**In the key** (xxh3-128 over canonical text; tensors by content):

* per method, in the caller's order: the method name and the ATen program in the
  preprocess cache's canonical form (:class:`fastlower.preprocess.keys.Canonical`:
  every node's op, name, target, arguments and ``meta`` but ``from_node`` and
  ``seq_nr``, object-id ``nn_module_stack`` keys as ordinals, fake tensors by
  shape/stride/dtype/device; the graph signature, range constraints, module call
  graph, every ``state_dict`` entry and constant by content), its example inputs
  and its verifiers; a ``meta`` value of a type that form does not know, and a
  constant that is not a tensor (a ``torch.ScriptObject``), by class and
  attributes (:mod:`.object_text`), else the call is not cached; a tensor subclass
  (torchao) by its class, its flattening context and its inner tensors' content;
* each partitioner, transform pass and pass manager as an object
  (:mod:`.object_text`): class by qualified name, the source digest of its package
  (and of every base class's), its attributes recursively (``DelegationSpec``,
  compile specs, XNNPACK's per-operator configs ...), in the argument's own
  structure (a list, or a dict per method);
* ``constant_methods`` and ``compile_config`` (``EdgeCompileConfig``, its
  preserved ops and exception list) the same way;
* absolute paths in node and delegate ``meta`` strings (``stack_trace``) below a base
  directory (the working directory, the script's repository, the Python prefixes
  and site-packages, ``FASTLOWER_CACHE_BASE_DIR``) relative to it (:mod:`.paths`): a
  checkout or environment at another path has the same key;
* the torch, executorch and fastlower versions, a digest of fastlower's own
  source, the Python version, the entry format;
* fastlower's switches that can turn a result into an error
  (``strict_tags()``, ``strict_partitioners()``, ``validation_disabled()``).

The backends that ran are known only after lowering: each entry records their
classes and source digests, and a hit whose backend sources changed since is a
miss (a manifest, as ccache's). What is left out, and why it cannot change the
result, is listed in docs/caching.md ("What the key contains").
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import platform
import types
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import sympy
import torch
import xxhash
from torch.export import ExportedProgram

from ..base import state
from ..preprocess.code_digests import NoSourceFile, directory_digest, operator_sources
from ..preprocess.keys import Canonical, TensorDigests, _is_fake, process_settings, versions
from .refit.provenance import flat_constants
from .object_text import ObjectCanonical, _operator_name
from .paths import PathMap, current
from .errors import Uncacheable

# 2: to_executorch entries without the execution programs; 3: large bytes (delegate
# payloads, the .pte) out of the pickle, in a section of their own; 4: meta paths keyed
# relative to base directories (.paths), the writer's bases in the info; 5: large bytes
# found inside another (the emitter's constants in the .pte) kept as slices of it
ENTRY_FORMAT = 5
_BIG_BYTES = 64
_SIMPLE = (type(None), bool, int, float, str, torch.fx.Node, torch.Tensor, list, tuple, dict,
           set, frozenset, torch.dtype, torch.device, torch.layout, torch.memory_format,
           torch.SymInt, torch.SymFloat, torch.SymBool)


@functools.lru_cache(maxsize=None)
def fastlower_source() -> str:
    """Digest of the installed fastlower package's files (a changed fastlower, same version)."""
    # the package's folder: this module's grandparent (fastlower/cache/key.py)
    return directory_digest(Path(__file__).resolve().parent.parent)


class ProgramCanonical(Canonical):
    """``keys.Canonical`` that refuses what it cannot write faithfully, and writes the
    parts of a lowered program the preprocess key never meets (delegate ``meta``,
    named data, verifiers, example inputs).

    With ``record=True`` every line is also kept with where it came from, so two
    programs can be compared line by line (verify mode names the first difference).
    """

    def __init__(self, tensor_digests: Optional[TensorDigests] = None, record: bool = False,
                 structure: bool = False, paths: Optional[PathMap] = None):
        super().__init__(tensor_digests)
        # paths: the strings of node and delegate meta keyed relative to its bases (.paths)
        self.paths = paths
        self.objects = ObjectCanonical(lambda t: self.tensor(t, with_data=True))
        self.where = ""
        self.lines: Optional[List[tuple]] = [] if record else None
        # structure=True: a second hash of the same text with the values of the top-level
        # programs' parameters, buffers and constants left out (:mod:`.refit`)
        self.structure = xxhash.xxh3_128() if structure else None
        self._depth = 0  # programs being written (a lowered module's inside its owner)
        self._values = True  # False while writing a structure-only text

    def write(self, text: str, structure_text: Optional[str] = None) -> None:
        super().write(text)
        if self.structure is not None:
            self.structure.update((text if structure_text is None else structure_text)
                                  .encode("utf-8", "surrogatepass"))
            self.structure.update(b"\x1f")
        if self.lines is not None:
            self.lines.append((self.where, text))

    # --- values ------------------------------------------------------------------
    def value(self, v: Any) -> str:
        if isinstance(v, (bytes, bytearray, memoryview)):
            v = bytes(v)
            if len(v) > _BIG_BYTES:
                return f"bytes[{len(v)}]:{xxhash.xxh3_128_hexdigest(v)}"
            return repr(v)
        if isinstance(v, _SIMPLE) or isinstance(v, enum.Enum) or (
                dataclasses.is_dataclass(v) and not isinstance(v, type)):
            return super().value(v)
        if isinstance(v, sympy.Basic):
            return f"sympy:{sympy.srepr(v)}"
        op = _operator_name(v)
        if op is not None:
            return f"op:{op}"
        if isinstance(v, (type, types.FunctionType, types.BuiltinFunctionType)):
            return super().value(v)  # a label in meta (source_fn_stack ...): its name
        return self.objects.text(v, self.where or "program")

    def meta_value(self, v: Any) -> str:
        if isinstance(v, str) and self.paths is not None:
            return repr(self.paths.relative(v))
        return super().meta_value(v)

    def tensor_digest(self, tensor: torch.Tensor) -> str:
        flatten = getattr(type(tensor), "__tensor_flatten__", None)
        if type(tensor) in (torch.Tensor, torch.nn.Parameter) or flatten is None:
            return super().tensor_digest(tensor)
        attrs, ctx = tensor.__tensor_flatten__()
        inner = ",".join(f"{a}={self.tensor(t, with_data=not _is_fake(t))}"
                         for a, t in ((a, getattr(tensor, a)) for a in attrs))
        return (f"{type(tensor).__module__}.{type(tensor).__qualname__}"
                f"({inner};{self.objects.text(ctx, 'tensor subclass context')})")

    # --- programs ----------------------------------------------------------------
    def graph(self, gm: torch.fx.GraphModule) -> None:
        # keys.Canonical.graph, with each node's path kept for the line records
        outer = self.where
        try:
            for node in gm.graph.nodes:
                self.where = f"{outer}/{node.name}" if outer else node.name
                self.node(gm, node)
        finally:
            self.where = outer

    def node_extra(self, node: torch.fx.Node) -> None:
        # users' order is part of a lowered program (the reference's apply keeps it)
        self.write(f"users:{','.join(map(self.node_label, node.users))}")

    def attribute(self, gm: torch.fx.GraphModule, target: str) -> None:
        from executorch.exir.lowered_backend_module import LoweredBackendModule

        obj: Any = gm
        for part in target.split("."):
            obj = getattr(obj, part, None)
        outer = self.where
        self.where = f"{outer}:{target}"
        try:
            super().attribute(gm, target)
            if isinstance(obj, LoweredBackendModule):
                self.write(f"lowered-meta:{self.meta_value(obj.meta)}")
                self.write(f"named-data:{self.value(obj.named_data_store_output)}")
        finally:
            self.where = outer

    def program(self, program: ExportedProgram) -> None:
        self._depth += 1
        try:
            super().program(program)
        finally:
            self._depth -= 1
        self.write(f"verifiers:{','.join(_verifier_text(v) for v in program.verifiers)}")
        paths, self.paths = self.paths, None  # node and delegate meta only
        try:
            self.write(f"example_inputs:{self.meta_value(program.example_inputs)}",
                       f"example_inputs:{self._without_values(program.example_inputs)}")
        finally:
            self.paths = paths

    def _without_values(self, value: Any) -> str:
        """``meta_value(value)`` with every tensor by its layout alone."""
        self._values = False
        try:
            return self.meta_value(value)
        finally:
            self._values = True

    def tensor(self, t: torch.Tensor, with_data: bool) -> str:
        return super().tensor(t, with_data and self._values)

    def program_constants(self, program: ExportedProgram) -> None:
        if self.structure is None or self._depth > 1:
            super().program_constants(program)
            return
        for name, tensor in program.state_dict.items():
            self.write(f"state:{name}={self.tensor(tensor, with_data=True)}",
                       f"state:{name}={self.layout(tensor)}")
        for name, value in program.constants.items():
            without = self.layout(value) if isinstance(value, torch.Tensor) else self.value(value)
            self.write(f"constant:{name}={self.value(value)}", f"constant:{name}={without}")

    def layout(self, tensor: torch.Tensor) -> str:
        """A tensor without its values (a subclass: its inner tensors' layouts and context)."""
        flatten = getattr(type(tensor), "__tensor_flatten__", None)
        if type(tensor) in (torch.Tensor, torch.nn.Parameter) or flatten is None:
            return self.tensor(tensor, with_data=False)
        attrs, ctx = tensor.__tensor_flatten__()
        inner = ",".join(f"{a}={self.layout(getattr(tensor, a))}" for a in attrs)
        return (f"{type(tensor).__module__}.{type(tensor).__qualname__}"
                f"({inner};{self.objects.text(ctx, 'tensor subclass context')})")


def _verifier_text(cls: type) -> str:
    if "<locals>" in cls.__qualname__ and cls.__qualname__.startswith("EXIREdgeDialectVerifier"):
        v = cls()
        return (f"edge(enable={v.enable},dim_order={v.use_dim_order},"
                f"exceptions={sorted(map(str, v._core_aten_ops_exception_list))},"
                f"preserve={sorted(map(str, v._preserve_ops))})")
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class LoweringKey:
    """A computed key and what it took."""

    key: str
    seconds: float
    lines: Optional[List[tuple]] = None  # (where, text) when asked for (``record=True``)
    # the same key with the programs' constant values left out (:mod:`.refit`), and each
    # method's plain-tensor constants by name -> content digest (what the key hashed)
    structure: Optional[str] = None
    digests: Optional[Dict[str, Dict[str, str]]] = None


def method_programs(programs: Any) -> Dict[str, ExportedProgram]:
    """The reference's normalisation: one program is ``{"forward": program}``."""
    return programs if isinstance(programs, dict) else {"forward": programs}


def lowering_key(programs: Any, transform_passes: Any, partitioner: Any,
                 constant_methods: Any, compile_config: Any,
                 generate_etrecord: bool, record: bool = False) -> LoweringKey:
    """The key of a ``to_edge_transform_and_lower`` call; :class:`Uncacheable` if it has none."""
    start = time.perf_counter()
    if generate_etrecord:
        raise Uncacheable("generate_etrecord=True: the ETRecord holds the edge stage's own "
                          "programs, which a hit does not build")
    methods = method_programs(programs)
    for name, program in methods.items():
        if not isinstance(program, ExportedProgram):
            raise Uncacheable(f"method {name!r} is a {type(program).__name__}, "
                              "not an ExportedProgram")
    canonical = ProgramCanonical(record=record, structure=True, paths=PathMap(current()))
    canonical.write(f"fastlower-lowering-cache:{ENTRY_FORMAT}")
    canonical.write(f"versions:{versions()};fastlower-source={fastlower_source()};"
                    f"python={platform.python_version()};{process_settings()}")
    canonical.write(f"switches:strict_tags={state.strict_tags_enabled()},"
                    f"strict_partitioners={state.strict_partitioners_enabled()},"
                    f"validation={state.validation_enabled()}")
    canonical.write(f"methods:{list(methods)}")
    for name, program in methods.items():
        canonical.where = f"method {name}"
        canonical.write(f"method:{name}")
        canonical.program(program)
    canonical.where = ""
    canonical.write(f"operators:{operators_text(methods.values())}")
    objects = canonical.objects
    canonical.write(f"partitioner:{objects.text(partitioner, 'partitioner')}")
    canonical.write(f"transform_passes:{objects.text(transform_passes, 'transform_passes')}")
    canonical.write(f"constant_methods:{objects.text(constant_methods, 'constant_methods')}")
    canonical.write(f"compile_config:{objects.text(compile_config, 'compile_config')}")
    structure = canonical.structure.hexdigest() if canonical.structure is not None else ""
    return LoweringKey("lowering:" + canonical.hasher.hexdigest(), time.perf_counter() - start,
                       canonical.lines, "structure:" + structure,
                       {name: constant_digests(program, canonical.tensor_digests)
                        for name, program in methods.items()})


def operators_text(programs: Any) -> str:
    """:func:`~fastlower.preprocess.code_digests.operator_sources`, uncacheable without a file."""
    try:
        return operator_sources(programs)
    except NoSourceFile as why:
        raise Uncacheable(str(why)) from why


def constant_digests(program: ExportedProgram, digests: TensorDigests) -> Dict[str, str]:
    """The program's parameters, buffers and constants (tensor subclasses by their inner
    tensors, ``name.attr``): name -> the content digest the key wrote for it (memoized by
    object in ``digests``)."""
    found = {}
    for name, value in flat_constants(program, strict=False).items():
        known = digests.get(id(value))
        if known is not None and known[0] is value:
            found[name] = known[1]
    return found
