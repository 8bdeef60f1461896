"""What fastlower's torch.fx hooks (``fastlower.partitioners.graph_edits``) cost the next
``torch.export`` + ``to_edge`` of the process.

One process lowers a small program once with ``fastlower.to_backend`` (that installs the
patches, as a user's first lowering does), then exports and ``to_edge``s a
stories110M-shaped ExecuTorch llama (``--hooks-model``) repeatedly, alternating a run
with fastlower's patches installed and one after ``fastlower.partitioners.uninstall()``
(the order flips every round).  ``extra_info`` holds each state's wall and CPU times,
the overhead of the installed state (min over rounds and median) and the number of
hooked ``Node`` calls one export + to_edge makes (counted in a separate, untimed run).

Run (see benchmarks/README.md, "torch.fx hooks"):
``python -m pytest benchmarks/test_fx_hooks_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Dict, List

import torch

SHAPES: Dict[str, Dict[str, Any]] = {
    # stories110M's params.json (export_llm's default example), no KV cache
    "stories110M": {"dim": 768, "multiple_of": 32, "n_heads": 12, "n_layers": 12,
                    "norm_eps": 1e-5, "vocab_size": 32000},
    "small": {"dim": 64, "n_heads": 4, "n_layers": 4, "vocab_size": 128},
}
HOOKED = ("__setattr__", "_update_args_kwargs", "_replace_input_with", "insert_arg", "_prepend",
          "_remove_from_list")


def _model(shape: str):
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    params = dict(SHAPES[shape], max_seq_len=128, max_context_len=128, use_kv_cache=False)
    torch.manual_seed(0)
    model = construct_transformer(ModelArgs(**params)).eval()
    return model, (torch.randint(0, params["vocab_size"], (1, 32)),)


def _export_and_to_edge(model, inputs) -> int:
    from executorch.exir import to_edge

    with torch.no_grad():
        aten = torch.export.export(model, inputs, strict=False)
    return len(to_edge(aten).exported_program().graph.nodes)


def _lower_once() -> None:
    """A user's first lowering: installs fastlower's patches."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge

    import fastlower

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    aten = torch.export.export(model.eval(), (torch.randn(1, 4),), strict=False)
    fastlower.to_backend(to_edge(aten).exported_program(), XnnpackPartitioner())


def _count_hooked_calls(model, inputs) -> Dict[str, int]:
    """Calls of each hooked ``Node`` entry point in one export + to_edge (untimed)."""
    from torch.fx.node import Node

    counts = dict.fromkeys(HOOKED, 0)
    saved = {name: Node.__dict__.get(name) for name in HOOKED}

    def counting(name, inner):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return inner(*args, **kwargs)
        return wrapper

    for name in HOOKED:
        setattr(Node, name, counting(name, getattr(Node, name)))
    try:
        _export_and_to_edge(model, inputs)
    finally:
        for name, value in saved.items():
            if value is None:
                delattr(Node, name)
            else:
                setattr(Node, name, value)
    return counts


def test_fx_hooks_cost(benchmark, request):
    import fastlower.partitioners as fp
    from fastlower.partitioners import registry

    shape = request.config.getoption("--hooks-model")
    rounds = request.config.getoption("--hooks-rounds")
    model, inputs = _model(shape)
    _lower_once()
    assert registry.is_installed()
    fp.uninstall()
    calls = _count_hooked_calls(model, inputs)
    times: Dict[str, List[float]] = {"installed": [], "uninstalled": []}
    cpu: Dict[str, List[float]] = {"installed": [], "uninstalled": []}
    nodes = {}
    order = iter(range(10 ** 6))

    def one_round():
        states = ("installed", "uninstalled")
        for state in states if next(order) % 2 == 0 else states[::-1]:
            if state == "installed":
                registry.install()
            else:
                fp.uninstall()
            gc.collect()
            start, start_cpu = time.perf_counter(), time.process_time()
            nodes[state] = _export_and_to_edge(model, inputs)
            times[state].append(time.perf_counter() - start)
            cpu[state].append(time.process_time() - start_cpu)
        fp.uninstall()

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    info = {"model": shape, "edge_nodes": nodes["uninstalled"], "hooked_calls": calls,
            "installed_s": times["installed"], "uninstalled_s": times["uninstalled"],
            "installed_cpu_s": cpu["installed"], "uninstalled_cpu_s": cpu["uninstalled"]}
    for name, series in (("wall", times), ("cpu", cpu)):
        best = {state: min(values) for state, values in series.items()}
        median = {state: statistics.median(values) for state, values in series.items()}
        info[f"{name}_overhead_min_pct"] = 100 * (best["installed"] / best["uninstalled"] - 1)
        info[f"{name}_overhead_median_pct"] = 100 * (
            median["installed"] / median["uninstalled"] - 1)
    benchmark.extra_info.update(info)
    print("\nfx hooks:", info)
    assert nodes["installed"] == nodes["uninstalled"]


def test_fx_hook_per_call(benchmark):
    """Cost of one hooked call outside ``accelerated()``: ``node.meta = ...``
    (``Node.__setattr__``) and ``node._update_args_kwargs(...)``, patches installed against
    uninstalled, alternating (min over 5 repeats of 200,000 calls, ns per call)."""
    import timeit

    from torch.fx import Graph

    import fastlower.partitioners as fp
    from fastlower.partitioners import registry

    graph = Graph()
    x = graph.placeholder("x")
    y = graph.call_function(torch.relu, (x,))
    meta: Dict[str, Any] = {}
    calls = {"__setattr__": lambda: setattr(y, "meta", meta),
             "_update_args_kwargs": lambda: y._update_args_kwargs((x,), {})}
    ns: Dict[str, Dict[str, List[float]]] = {name: {"installed": [], "uninstalled": []}
                                             for name in calls}

    def one_round():
        for state in ("uninstalled", "installed"):
            registry.install() if state == "installed" else fp.uninstall()
            for name, call in calls.items():
                best = min(timeit.repeat(call, number=200_000, repeat=5))
                ns[name][state].append(best / 200_000 * 1e9)
        fp.uninstall()

    benchmark.pedantic(one_round, rounds=2, iterations=1)
    info = {f"{name}_{state}_ns": min(values) for name, per in ns.items()
            for state, values in per.items()}
    benchmark.extra_info.update(info)
    print("\nper call:", info)
