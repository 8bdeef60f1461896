"""Partitions of one structure: preprocess a few, derive the others byte for byte.

* :mod:`.shape_key`: a partition's structure key (its program without names, debug
  handles or constant values), its constants and handles;
* :mod:`.constant_bytes`: the catalog of steps a backend applies to a constant before
  it stores it as named data;
* :mod:`.xnnpack_blob`: where an XNNPACK blob holds named keys and debug handles;
* :mod:`.template`: learn a template from one real result, derive another member's;
* :mod:`.classes`: the classes of a lowering, proven on a second member, and what the
  report says about them.
"""
