"""``ExportGraphSignature.inputs_to_*`` computed once per signature inside ``accelerated()``.

The reference's properties build a fresh dict from every input spec on each access, and
``torch._export.utils.is_param``/``is_buffer``/``is_lifted_tensor_constant`` read them
once per node, so a partitioner asking about every node pays nodes x specs (see
pytorch/executorch#18352).  Inside ``accelerated()`` each property's mapping is built
once per signature object (the same ``MappingProxyType`` content and order) and reused
while the signature is unchanged:

* ``input_specs`` is the same list object, of the same length, holding the same spec
  objects in the same order (one identity comparison per spec, in C: ``list.__eq__``
  compares identical items without calling their ``__eq__``);
* no attribute of an ``InputSpec``, ``TensorArgument`` or ``CustomObjArgument`` was
  assigned in this context since (an epoch counter in the scope, bumped by their
  ``__setattr__``: so ``spec.arg.name = "x"`` or ``spec.kind = ...`` is seen).

The cache lives in the scope of the outermost ``accelerated()`` block.  The mapping is a
read-only proxy, so sharing it between calls cannot leak a caller's change.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping

from .registry import Patch, register
from .switch import _SCOPE, current_scope, is_active

PROPERTIES = ("inputs_to_parameters", "inputs_to_buffers", "inputs_to_lifted_tensor_constants",
              "inputs_to_lifted_custom_objs")


class Entry:
    __slots__ = ("signature", "specs", "items", "epoch", "maps")

    def __init__(self, signature: Any, specs: list, epoch: int) -> None:
        self.signature = signature      # keeps the id used as the key alive
        self.specs = specs              # the list object
        self.items = list(specs)        # its items, compared by identity
        self.epoch = epoch
        self.maps: Dict[str, Mapping[str, str]] = {}


def _cached_property(name: str, reference: property) -> property:
    compute: Callable[[Any], Mapping[str, str]] = reference.fget  # type: ignore[assignment]

    def getter(self) -> Mapping[str, str]:
        if not is_active():
            return compute(self)
        scope = current_scope()
        specs = self.input_specs
        if scope is None or type(specs) is not list:
            return compute(self)
        entry = scope.signatures.get(id(self))
        if (entry is None or entry.signature is not self or entry.specs is not specs
                or entry.epoch != scope.signature_epoch or entry.items != specs):
            entry = scope.signatures[id(self)] = Entry(self, specs, scope.signature_epoch)
        found = entry.maps.get(name)
        if found is None:
            found = entry.maps[name] = compute(self)
        return found

    getter.__name__ = name
    getter.__doc__ = reference.__doc__
    return property(getter, reference.fset, reference.fdel, reference.__doc__)


def _counting_setattr(original: Any) -> Callable[[Any, str, Any], None]:
    assign = object.__setattr__ if original is None else original

    def __setattr__(self, name: str, value: Any) -> None:
        scope = _SCOPE.get()
        if scope is not None:
            scope.signature_epoch += 1
        assign(self, name, value)

    return __setattr__


def _cached(name: str) -> Callable[[property], property]:
    """The patch of property ``name``: the reference's, cached."""
    return lambda original: _cached_property(name, original)


_MODULE = "torch.export.graph_signature"
for _name in PROPERTIES:
    register(Patch(_MODULE, "ExportGraphSignature", _name, _cached(_name),
                   "built once per signature inside accelerated() (reused while unchanged)"))
for _cls in ("InputSpec", "TensorArgument", "CustomObjArgument"):
    register(Patch(_MODULE, _cls, "__setattr__", _counting_setattr,
                   "counts attribute writes inside accelerated() (signature cache validity)"))
