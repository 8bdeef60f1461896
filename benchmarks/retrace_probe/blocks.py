"""Offline reader of ``RETRACE_PROBE_BLOCKS`` dumps: does a retrace name each block's nodes
as it names the block before, shifted by a constant per base name?

``python benchmarks/retrace_probe/blocks.py FOLDER CALL [in|out] [OTHER_FOLDER]``: for
each pair of consecutive layers, whether their nodes have the same targets in the same
order, and per base name (``mul`` of ``mul_181``) the set of index shifts between matching
nodes; one shift per position, the same for every pair, is what stamping a block's names
would need. Also the unbacked symbols each layer's values hold. With ``OTHER_FOLDER`` (the
same program at another depth): the shifts of the nodes before the first layer and after
the last (placeholders left out), between the two depths.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path


def _split(name):
    found = re.fullmatch(r"(.*?)(?:_(\d+))?", name)
    return found.group(1), int(found.group(2) or 0)


def read(folder: Path, call: int, side: str):
    (path,) = folder.glob(f"blocks-{call}-{side}-*.txt")
    rows = [line.split("\t") for line in path.read_text().splitlines() if line]
    layers = defaultdict(list)
    for name, target, layer, unbacked in rows:
        layers[layer].append((name, target, unbacked))
    return layers


def shifts(a, b):
    out = defaultdict(set)
    for (na, _, _), (nb, _, _) in zip(a, b):
        (base_a, ia), (base_b, ib) = _split(na), _split(nb)
        if base_a != base_b:
            out["<base differs>"].add((na, nb))
        else:
            out[base_a].add(ib - ia)
    return out


def _rows(folder: Path, call: int, side: str):
    (path,) = folder.glob(f"blocks-{call}-{side}-*.txt")
    return [line.split("\t") for line in path.read_text().splitlines() if line]


def head_and_tail(folder: Path, other: Path, call: int, side: str):
    """The non-placeholder nodes before the first layer and after the last, per depth."""
    parts = []
    for where in (folder, other):
        rows = _rows(where, call, side)
        inside = [i for i, row in enumerate(rows) if row[2] != "-"]
        head = [r for r in rows[:inside[0]] if not r[1].startswith(("p_", "b_", "c_"))
                and r[0] != r[1]]  # a placeholder's target is its name
        parts.append((head, rows[inside[-1] + 1:]))
    for label, index in (("head", 0), ("tail", 1)):
        a, b = parts[0][index], parts[1][index]
        found = defaultdict(set)
        for (na, _, _, _), (nb, _, _, _) in zip(a, b):
            (base_a, ia), (base_b, ib) = _split(na), _split(nb)
            found[base_a if base_a == base_b else "<base differs>"].add(ib - ia)
        print(f"  {label}: {len(a)} / {len(b)} nodes, same targets "
              f"{[r[1] for r in a] == [r[1] for r in b]}, shifts "
              f"{ {k: sorted(v) for k, v in found.items() if v != {0}} }")


def main():
    folder, call = Path(sys.argv[1]), int(sys.argv[2])
    side = sys.argv[3] if len(sys.argv) > 3 else "out"
    layers = read(folder, call, side)
    numbered = sorted((k for k in layers if k != "-"), key=int)
    print(f"call {call} {side}: layers {numbered}, nodes per layer "
          f"{[len(layers[k]) for k in numbered]}, outside {len(layers['-'])}")
    per_pair = []
    for a, b in zip(numbered, numbered[1:]):
        same_targets = [t for _, t, _ in layers[a]] == [t for _, t, _ in layers[b]]
        s = shifts(layers[a], layers[b])
        per_pair.append(s)
        multi = {k: sorted(v) for k, v in s.items() if len(v) > 1}
        print(f"  {a}->{b}: same targets {same_targets}; bases {len(s)}, "
              f"with more than one shift {len(multi)}: {dict(list(multi.items())[:6])}")
    vectors = [[_split(nb)[1] - _split(na)[1] for (na, _, _), (nb, _, _) in
                zip(layers[a], layers[b])] for a, b in zip(numbered, numbered[1:])]
    print(f"  one shift per position, the same for every pair: "
          f"{all(v == vectors[0] for v in vectors)}")
    if len(per_pair) > 1:
        bases = set().union(*per_pair)
        moving = {k: [sorted(p.get(k, ())) for p in per_pair] for k in bases
                  if len({tuple(sorted(p.get(k, ()))) for p in per_pair}) > 1}
        print(f"  bases whose shift differs between pairs: {len(moving)} "
              f"{dict(list(moving.items())[:8])}")
    for k in numbered:
        syms = sorted({s for _, _, u in layers[k] for s in u.split(",") if s})
        print(f"  layer {k} unbacked: {syms[:12]}")
    if len(sys.argv) > 4:
        head_and_tail(folder, Path(sys.argv[4]), call, side)


if __name__ == "__main__":
    main()
