"""Turn the benchmark JSON into a plot, a results table and the target checks.

    .venv/bin/python benchmarks/report.py [benchmarks/results.json]
        writes benchmarks/lowering_times.png and the table + targets into
        benchmarks/README.md (between the ``results`` markers)
    .venv/bin/python benchmarks/report.py --profile [--profile-layers 32]
        cProfiles one fastlower (b) lowering and writes the top functions into
        benchmarks/README.md (between the ``profile`` markers)

Times are the minimum over a case's rounds (the least noisy estimate on a
shared machine); peak RSS growth is the maximum over rounds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "README.md")
PNG = os.path.join(HERE, "lowering_times.png")
SETUP_LABEL = {"xnnpack": "(a) XNNPACK", "pretagged": "(b) pre-tagged", "many": "single-op"}

# --------------------------------------------------------------------------- loading


def load(paths: List[str]):
    """Merge result files; a later file's entry replaces an earlier one's for the same case."""
    data = {}
    benchmarks = []
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        if not data:
            data = d
        else:
            data.setdefault("extra_runs", []).append(d)
        benchmarks.extend(d["benchmarks"])
    cases: Dict[Tuple[str, int], Dict[str, dict]] = {}
    for b in benchmarks:
        info = b.get("extra_info", {})
        if "setup" not in info:
            continue
        entry = dict(info)
        entry["t"] = info.get("time_min_s", b["stats"]["min"])
        cases.setdefault((info["setup"], info["layers"]), {})[info["impl"]] = entry
    return data, cases


def _t(cases, setup, n, impl) -> Optional[float]:
    e = cases.get((setup, n), {}).get(impl)
    return e["t"] if e else None


def _fmt_s(x: Optional[float]) -> str:
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 1:
        return f"{x:.2f}"
    if x >= 0.01:
        return f"{x:.3f}"
    return f"{x:.4f}"


def _fmt_x(x: Optional[float]) -> str:
    if x is None:
        return "–"
    return f"{x:.0f}×" if x >= 100 else f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"


def _fmt_mib(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.1f}"


# --------------------------------------------------------------------------- table


def table(cases) -> str:
    rows = ["| set-up | layers | nodes | partitions | reference s | fastlower s | ratio | "
            "peak RSS Δ ref MiB | peak RSS Δ fastlower MiB | fastlower partition+plan / "
            "preprocess / apply s | XNNPACK preprocess ref / fastlower s | "
            "verifier ref / fastlower s | output = ref |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|:-:|"]
    order = {"xnnpack": 0, "pretagged": 1, "many": 2}
    for (setup, n) in sorted((k for k in cases if k[0] in order),
                             key=lambda k: (order[k[0]], k[1])):
        c = cases[(setup, n)]
        ref, fl = c.get("reference"), c.get("fastlower")
        any_ = fl or ref
        ratio = ref["t"] / fl["t"] if ref and fl else None
        phases = "–"
        if fl and fl.get("phases_s"):
            p = fl["phases_s"]
            phases = " / ".join(_fmt_s(p.get(k)) for k in ("partition+plan", "preprocess", "apply"))
        xnn = "–"
        if setup == "xnnpack":
            xnn = " / ".join(_fmt_s(e.get("xnnpack_preprocess_s")) if e else "–" for e in (ref, fl))
        verifier = " / ".join(_fmt_s(e.get("verifier_s")) if e else "–" for e in (ref, fl))
        match = "–"
        if fl and "matches_reference" in fl:
            match = "yes" if fl["matches_reference"] else f"**NO**: {fl.get('mismatch', '')}"
        rows.append(
            f"| {SETUP_LABEL[setup]} | {n} | {any_['nodes']} | {any_['partitions']} | "
            f"{_fmt_s(ref and ref['t'])} | {_fmt_s(fl and fl['t'])}"
            f"{' (twin)' if fl and fl.get('native_core') is False else ''} | {_fmt_x(ratio)} | "
            f"{_fmt_mib(ref and ref['peak_rss_growth_mib'])} | "
            f"{_fmt_mib(fl and fl['peak_rss_growth_mib'])} | {phases} | {xnn} | {verifier} | "
            f"{match} |")
    floors = sorted(n for (s, n) in cases if s == "floor")
    if floors:
        rows += ["", "Graph-copy floor (same Edge graph): `copy.deepcopy(graph_module)` / "
                 "`Graph.graph_copy` + `GraphModule`", "",
                 "| layers | nodes | deepcopy | graph_copy + GraphModule |",
                 "|---:|---:|---:|---:|"]
        for n in floors:
            c = cases[("floor", n)]
            nodes = next(iter(c.values()))["nodes"]
            rows.append(f"| {n} | {nodes} | {_fmt_s(_t(cases, 'floor', n, 'deepcopy'))} | "
                        f"{_fmt_s(_t(cases, 'floor', n, 'graph_copy'))} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- targets


def _slope(points: List[Tuple[float, float]]) -> Optional[float]:
    if len(points) < 2:
        return None
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(y) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None


def _verdict(ok: Optional[bool]) -> str:
    return "n/a (not measured)" if ok is None else ("**met**" if ok else "**missed**")


def targets(cases) -> str:
    out = []
    # 1. (b) at 32 layers >= 50x
    r, f = _t(cases, "pretagged", 32, "reference"), _t(cases, "pretagged", 32, "fastlower")
    ratio = r / f if r and f else None
    out.append(f"* (b) pre-tagged, 32 layers: ratio {_fmt_x(ratio)} (target ≥ 50×): "
               f"{_verdict(None if ratio is None else ratio >= 50)}")
    # 2. slope of fastlower (b) from 4 to 64 layers <= 1.1
    pts = sorted((cases[("pretagged", n)]["fastlower"]["nodes"],
                  cases[("pretagged", n)]["fastlower"]["t"])
                 for (s, n) in cases if s == "pretagged" and 4 <= n <= 64
                 and "fastlower" in cases[("pretagged", n)])
    slope = _slope(pts)
    end = _slope([pts[0], pts[-1]]) if len(pts) >= 2 else None
    span = (f"{len(pts)} sizes, {pts[0][0]}–{pts[-1][0]} nodes" if len(pts) >= 2
            else "needs ≥ 2 sizes")
    out.append("* fastlower (b) log-log slope, 4→64 layers: "
               f"{slope if slope is None else f'{slope:.2f}'} "
               f"(least squares over {span}; end points {end if end is None else f'{end:.2f}'}) "
               f"(target ≤ 1.1): {_verdict(None if slope is None else slope <= 1.1)}")
    # 3. many-partition vs graph-copy floor (within 3x)
    many = [n for (s, n) in cases if s == "many"]
    if many:
        n = many[0]
        fl = cases[("many", n)].get("fastlower")
        dc, gc = _t(cases, "floor", n, "deepcopy"), _t(cases, "floor", n, "graph_copy")
        if fl and dc:
            out.append(f"* single-op many-partition case ({fl['partitions']} partitions, "
                       f"{n} layers): "
                       f"fastlower {_fmt_s(fl['t'])} = {fl['t'] / dc:.1f}× the deepcopy floor "
                       f"({_fmt_s(dc)})"
                       + (f", {fl['t'] / gc:.1f}× the graph_copy floor ({_fmt_s(gc)})"
                          if gc else "")
                       + f" (target within 3×): {_verdict(fl['t'] <= 3 * dc)}")
            ref = cases[("many", n)].get("reference")
            if ref:
                out.append(f"  (reference {_fmt_s(ref['t'])}, ratio {_fmt_x(ref['t'] / fl['t'])})")
            v = fl.get("fastest_round_hooks_s", {}).get("verifier")
            if v is not None:
                out.append(f"  * of which ExecuTorch's verifier (input and result, which the "
                           f"reference validates too) {_fmt_s(v)} s = {v / dc:.1f}× the floor by "
                           f"itself; the rest, {_fmt_s(fl['t'] - v)} s, is "
                           f"{(fl['t'] - v) / dc:.1f}× the floor")
        else:
            out.append("* many-partition vs graph-copy floor: n/a (not measured)")
    # 4. (a) at 32 layers >= 2x, with XNNPACK's own share
    c = cases.get(("xnnpack", 32), {})
    r, f = c.get("reference"), c.get("fastlower")
    ratio = r["t"] / f["t"] if r and f else None
    line = (f"* (a) XNNPACK, 32 layers: ratio {_fmt_x(ratio)} (target ≥ 2×): "
            f"{_verdict(None if ratio is None else ratio >= 2)}")
    for name, e in (("reference", r), ("fastlower", f)):
        if e:
            pre, part = e.get("xnnpack_preprocess_s", 0.0), e.get("partition_s", 0.0)
            own = e["t"] - pre - part
            line += (f"\n  * {name} {_fmt_s(e['t'])} s: XNNPACK preprocess {_fmt_s(pre)} s "
                     f"({100 * pre / e['t']:.0f}%), "
                     f"XnnpackPartitioner.partition() {_fmt_s(part)} s "
                     f"({100 * part / e['t']:.0f}%), lowering machinery {_fmt_s(own)} s "
                     f"({100 * own / e['t']:.0f}%)")
    out.append(line)
    # 5. peak RSS growth at 64 layers <= 1/10 of reference
    for setup in ("xnnpack", "pretagged"):
        c = cases.get((setup, 64), {})
        r, f = c.get("reference"), c.get("fastlower")
        if r and f:
            q = (f["peak_rss_growth_mib"] / r["peak_rss_growth_mib"]
                 if r["peak_rss_growth_mib"] else None)
            out.append(f"* peak RSS growth, {SETUP_LABEL[setup]}, 64 layers: fastlower "
                       f"{_fmt_mib(f['peak_rss_growth_mib'])} MiB vs reference "
                       f"{_fmt_mib(r['peak_rss_growth_mib'])} MiB = "
                       f"{'–' if q is None else f'{q:.2f}'} (target ≤ 0.10): "
                       f"{_verdict(None if q is None else q <= 0.10)}")
        else:
            out.append(f"* peak RSS growth, {SETUP_LABEL[setup]}, 64 layers: n/a (not measured)")
    return "\n".join(out)


# --------------------------------------------------------------------------- plot


def plot(cases, path: str = PNG) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    colors = {"xnnpack": "tab:blue", "pretagged": "tab:orange"}
    for setup in ("xnnpack", "pretagged"):
        for impl, style in (("reference", "-o"), ("fastlower", "--s")):
            pts = sorted((c[impl]["nodes"], c[impl]["t"]) for (s, n), c in cases.items()
                         if s == setup and impl in c)
            if pts:
                ax.plot(*zip(*pts), style, color=colors[setup],
                        label=f"{SETUP_LABEL[setup]} {impl}")
    for impl, style in (("deepcopy", "-^"), ("graph_copy", ":v")):
        pts = sorted((c[impl]["nodes"], c[impl]["t"]) for (s, n), c in cases.items()
                     if s == "floor" and impl in c)
        if pts:
            ax.plot(*zip(*pts), style, color="gray", label=f"graph-copy floor ({impl})")
    for (s, _), c in cases.items():
        if s != "many":
            continue
        for impl, marker in (("reference", "*"), ("fastlower", "P")):
            if impl in c:
                e = c[impl]
                ax.plot([e["nodes"]], [e["t"]], marker, color="tab:red", markersize=12,
                        label=f"single-op ({e['partitions']} partitions) {impl}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Edge graph call_function nodes")
    ax.set_ylabel("to_backend time, s (min over rounds)")
    ax.set_title("to_backend: reference vs fastlower (Llama decoder 1–64 layers)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


# --------------------------------------------------------------------------- README


def replace_between(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        return re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    return text.rstrip() + "\n\n" + block + "\n"


def write_readme(name: str, body: str) -> None:
    text = open(README).read() if os.path.exists(README) else "# Benchmarks\n"
    with open(README, "w") as f:
        f.write(replace_between(text, name, body))


def _run_line(data, label: str) -> str:
    bench = data.get("fastlower_bench", {})
    core = bench.get("native_core")
    planner = {True: "native `fastlower._core`", False: "pure-Python twin (no `_core` built)"}.get(
        core, "unknown")
    wall = bench.get("wall_s")
    return (f"{label} {data.get('datetime', '?')[:19]} UTC, fastlower planner: {planner}, "
            f"wall time {'?' if wall is None else f'{wall / 60:.1f} min'}, "
            f"args `{' '.join(bench.get('argv', []))}`")


def results_section(data, cases, json_paths: List[str]) -> str:
    bench = data.get("fastlower_bench", {})
    mi = data.get("machine_info", {})
    core = bench.get("native_core")
    planner = {True: "native `fastlower._core`", False: "pure-Python twin (no `_core` built)"}.get(
        core, "unknown")
    wall = bench.get("wall_s")
    cpu = mi.get("cpu", {}).get("brand_raw", "?")
    files = ", ".join(f"`{os.path.relpath(p, os.path.dirname(HERE))}`" for p in json_paths)
    head = [f"Run {data.get('datetime', '?')[:19]} UTC ({files}); "
            f"fastlower planner: {planner}; {cpu}, {mi.get('cpu', {}).get('count', '?')} cores, "
            f"Python {mi.get('python_version', '?')}; session wall time "
            f"{'?' if wall is None else f'{wall / 60:.1f} min'}; "
            f"args `{' '.join(bench.get('argv', []))}`."]
    extra = [f"* {_run_line(d, 'plus run')}" for d in data.get("extra_runs", [])]
    head += ["", *extra] if extra else []
    head += ["", f"![time vs nodes]({os.path.basename(PNG)})", "",
            table(cases), "", "Targets:", "", targets(cases)]
    return "\n".join(head)


# --------------------------------------------------------------------------- profile


def profile(n_layers: int, top: int) -> str:
    import copy
    import cProfile
    import io
    import pstats
    import warnings

    warnings.filterwarnings("ignore")
    sys.path.insert(0, HERE)
    import fastlower  # the installed package, as the benchmarks use
    import fastlower.core.plan
    from fastlower.frontends.examples.llama import edge_llama

    import benchlib

    warm, _ = edge_llama(1)
    fastlower.to_backend(warm, benchlib.PretaggedPartitioner(benchlib.xnnpack_tags(warm)))
    program, _ = edge_llama(n_layers)
    tags = benchlib.xnnpack_tags(program)
    work = copy.deepcopy(program)
    partitioner = benchlib.PretaggedPartitioner(tags)
    prof = cProfile.Profile()
    prof.enable()
    fastlower.to_backend(work, partitioner)
    prof.disable()
    rep = fastlower.last_report()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    text = buf.getvalue()
    text = text.replace(os.path.join(sys.prefix, "lib",
                                     f"python{sys.version_info[0]}.{sys.version_info[1]}",
                                     "site-packages") + "/", "")
    text = text.replace(os.path.dirname(HERE) + "/", "")
    text = text.replace(
        os.path.dirname(os.path.dirname(os.path.dirname(fastlower.__file__))) + "/", "")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    core = fastlower.core.plan.backend_module()
    planner = f"native _core ({core.__file__})" if core is not None else "Python twin"
    phases = ", ".join(f"{k} {v:.3f} s" for k, v in rep.phases.items())
    return "\n".join([
        f"cProfile of `fastlower.to_backend` (b) pre-tagged, {n_layers} layers "
        f"({benchlib.call_function_count(program)} nodes, "
        f"{sum(rep.partitions.values())} partitions), "
        f"planner: {planner}. Under the profiler: {rep.seconds:.3f} s ({phases}). "
        f"Top {top} by cumulative time:", "", "```", *lines[start:start + top + 1], "```"])


# --------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="*", default=[os.path.join(HERE, "results.json")],
                    help="result files (later ones replace earlier ones' entries per case)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile fastlower (b) and write it to README")
    ap.add_argument("--profile-layers", type=int, default=32)
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument("--no-readme", action="store_true", help="print instead of editing README.md")
    args = ap.parse_args(argv)
    if args.profile:
        body = profile(args.profile_layers, args.profile_top)
        if not args.no_readme:
            write_readme("profile", body)
        print(body)
        return 0
    data, cases = load(args.json)
    plot(cases)
    body = results_section(data, cases, [os.path.abspath(p) for p in args.json])
    if args.no_readme:
        print(body)
    else:
        write_readme("results", body)
        print(body)
        print(f"\nwrote {PNG} and {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
