"""Regenerate the core fuzzer's seed corpus (``fuzz/corpus/``) from real encoded graphs.

Lowers the bundled 1-layer Llama with XNNPACK and the ``tests/models/registry.py`` cases
with fastlower, records every graph the planner is handed (top level and
``cond``/``map`` bodies, with their delegation tags), and writes for each one
seed per core entry point in ``corpus_format``'s byte format: the planner's own
simulator sequence, ``plan_graph`` on both lowering paths, ``group_by_tag`` of its
tags, its contract arrays, its structure arrays (for ``first_difference``) and its
node names.

Run from the repository root::

    .venv/bin/python fuzz/make_corpus.py            # rewrites fuzz/corpus/
    .venv/bin/python fuzz/make_corpus.py --out DIR --cases cond_demo --no-llama
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import sys
import warnings
from typing import List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # tests.models

import corpus_format as cf  # noqa: E402

CASES = ["conv_relu_tan", "conv_relu_tan_split", "cond_demo", "map_demo", "nested_cf_demo",
         "shared_param_xnnpack", "shared_const_demo", "buffer_mutation_demo",
         "list_arg_const_xnnpack", "missing_tag", "split_output_demo"]


def record_graphs(cases: Sequence[str] = CASES,
                  llama: bool = True) -> List[Tuple[str, object, List[str], bool]]:
    """(label, EncodedGraph, tag names, is a body) of every graph planned while lowering the seed
    models (the 1-layer Llama when ``llama``, then ``cases``)."""
    import fastlower
    from fastlower.lowering import steps as lowering  # where to_backend plans
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from fastlower.frontends.examples.llama import edge_llama
    from tests.models import registry as models

    recorded = []
    label = ["?"]
    original = lowering.plan_program

    def recording_plan_program(enc, tag_names, *args, **kwargs):
        stack = [(enc, False)]
        while stack:
            e, is_body = stack.pop()
            recorded.append((f"{label[0]}_{len(recorded)}", e, list(tag_names), is_body))
            stack.extend((sub, True) for subs in e.nested.values() for _, sub in subs)
        return original(enc, tag_names, *args, **kwargs)

    lowering.plan_program = recording_plan_program
    try:
        if llama:
            label[0] = "llama1_xnnpack"
            program, _ = edge_llama(1)
            fastlower.to_backend(program, XnnpackPartitioner())
        for name in cases:
            label[0] = name
            built = models.MODEL_CASES[name].build()
            partitioner = built.partitioner
            if isinstance(partitioner, dict):
                partitioner = partitioner["forward"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fastlower.to_backend(built.epm.exported_program(), partitioner)
    finally:
        lowering.plan_program = original
    return recorded


def write_graph(w: cf.Writer, a, n_tags: int) -> None:
    """``fuzz_core.read_consistent_graph``'s layout."""
    n = len(a.op)
    w.length(n, cf.MAX_NODES)
    w.length(n_tags, cf.MAX_TAGS)
    for i in range(n):
        w.uint(a.op[i])
        w.length(len(a.inputs[i]), cf.MAX_INPUTS)
        for x in a.inputs[i]:
            w.uint(x)
        w.text(a.names[i])
        w.sint(a.tags[i])
        w.uint(a.roles[i])
        w.sint(a.targets[i])
        w.sint(a.debug_handles[i])
        w.byte(int(a.fake_vals[i]))
        w.byte(int(a.prioritized[i]))
    for x in range(n):
        w.length(len(a.users[x]), cf.MAX_LIST)
        for u in a.users[x]:
            w.uint(u)
    w.length(len(a.out_args), cf.MAX_OUTPUTS)
    for x, kind, target in zip(a.out_args, a.out_kinds, a.out_targets):
        w.sint(x)
        w.uint(kind)
        w.sint(target)


def _csr(lists: Sequence[Sequence[int]]) -> Tuple[List[int], List[int]]:
    """(offsets, flat) of ``lists``, the compressed rows the contract check takes."""
    offsets, flat = [0], []
    for xs in lists:
        flat.extend(xs)
        offsets.append(len(flat))
    return offsets, flat


def _graph_seed(kind: int, arrays, tag_names: List[str], is_submodule: bool) -> "cf.Writer":
    """A seed's common start: its harness, the tags, the graph."""
    w = cf.Writer()
    w.uint(kind)
    w.texts(tag_names, cf.MAX_TAGS)
    w.byte(int(is_submodule))
    w.byte(cf.GRAPH_CONSISTENT)
    write_graph(w, arrays, len(tag_names))
    return w


def seeds_of(enc, tag_names: List[str], is_submodule: bool) -> List[Tuple[str, bytes]]:
    from fastlower.core.encode import TargetKeys, structure_arrays

    a = enc.arrays
    out = []
    for single in (True, False):
        w = _graph_seed(cf.SIMULATOR, a, tag_names, is_submodule)
        ops = [(cf.OP_PLAN_DUPLICATE,), (cf.OP_PLAN_FUSE_ALL, single)]
        if not single:
            ops += [(cf.OP_INSERT_DELEGATE, pid) for pid in range(min(len(tag_names), 8))]
        ops += [(cf.OP_ORDER,), (cf.OP_MAX_DH,)]
        w.length(len(ops), cf.MAX_OPS)
        for op in ops:
            w.uint(op[0])
            for arg in op[1:]:
                if isinstance(arg, bool):
                    w.byte(int(arg))
                else:
                    w.sint(arg)
        out.append((f"sim_{'single' if single else 'multi'}", w.bytes()))

    # fuzz_core.fuzz_plan_graph's layout: the options plan.py gives, on both paths
    for insertion, path in ((0, "single"), (1, "multi")):
        w = _graph_seed(cf.PLAN_GRAPH, a, tag_names, is_submodule)
        w.byte(insertion)
        w.byte(0)  # no validation stop
        w.byte(0)  # no_copy: one flag byte per node
        for flag in enc.no_copy:
            w.byte(int(flag))
        w.byte(1)  # the duplication order plan.py computes
        out.append((f"plan_{path}", w.bytes()))

    w = cf.Writer()
    w.uint(cf.GROUP_BY_TAG)
    w.sints(a.tags, cf.MAX_LIST)
    w.sint(len(tag_names))
    out.append(("group", w.bytes()))

    offsets, flat = _csr(a.users)
    w = cf.Writer()
    w.uint(cf.CONTRACT)
    for values in (a.op, a.tags, a.roles, enc.no_copy, offsets, flat):
        w.sints(values, cf.MAX_LIST)
    w.byte(0)
    out.append(("contract", w.bytes()))

    structure = list(structure_arrays(enc.graph_module, TargetKeys()))
    w = cf.Writer()
    w.uint(cf.FIRST_DIFFERENCE)
    for values in structure + structure:
        w.sints(values, cf.MAX_LIST)
    out.append(("identity", w.bytes()))

    w = cf.Writer()
    w.uint(cf.NAMES)
    w.texts(a.names[:32], 32)
    w.texts(["getitem", "executorch_call_delegate", "lowered_module_0"]
            + [f"fused_{t}" for t in tag_names][:29], 32)
    out.append(("names", w.bytes()))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Write the seeds; returns how many."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "corpus"),
                    help="corpus directory, emptied first (default: fuzz/corpus)")
    ap.add_argument("--cases", nargs="*", default=CASES,
                    help="tests/models/registry.py cases to lower (default: the seed set)")
    ap.add_argument("--no-llama", action="store_true", help="skip the 1-layer Llama")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    try:
        graphs = record_graphs(args.cases, llama=not args.no_llama)
    finally:
        logging.disable(logging.NOTSET)
    corpus = args.out
    shutil.rmtree(corpus, ignore_errors=True)
    os.makedirs(corpus)
    count = 0
    for label, enc, tag_names, is_body in graphs:
        if len(enc.arrays.op) > cf.MAX_NODES or len(tag_names) > cf.MAX_TAGS:
            print(f"skipped {label}: beyond the format's bounds")
            continue
        for kind, data in seeds_of(enc, tag_names, is_body):
            digest = hashlib.sha1(data).hexdigest()[:12]
            with open(os.path.join(corpus, f"{label}_{kind}_{digest}"), "wb") as f:
                f.write(data)
            count += 1
    print(f"wrote {count} seeds from {len(graphs)} graphs to {corpus}")
    return count


if __name__ == "__main__":
    main()
