"""An export script as a user writes it, for ``fastlower run`` (tests/cli/test_run.py).

    python run_script.py OUT.pte SEEN.json [--skip-lowering] [--thread] [--exit N | --raise]

Exports a small model, lowers it with ``to_edge_transform_and_lower`` and two
partitioners (XNNPACK's linear layers first, then everything else XNNPACK
takes: one ``to_backend`` call each), writes the ``.pte``, prints a line, and
records what it saw of its process (argv, ``__name__``, ``__file__``,
``sys.path[0]``, whether ``__main__`` is this module) in SEEN.json. Then exits
with N, or raises. ``--skip-lowering``: only the record, no ``.pte``;
``--thread``: the export runs in a (non-daemon) thread the script leaves running.
"""

import json
import sys
import threading

import torch
from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return torch.sigmoid(self.l2(torch.relu(self.l1(x)) + 1.0)).cumsum(-1)


def export(out):
    program = torch.export.export(Net().eval(), (torch.randn(4, 16),))
    edge = to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner(configs=[LinearConfig]), XnnpackPartitioner()])
    with open(out, "wb") as f:
        f.write(edge.to_executorch().buffer)
    print(f"run_script: wrote {out}")


def main(argv):
    out, seen = argv[1], argv[2]
    if "--skip-lowering" not in argv:
        if "--thread" in argv:  # python waits for it before exiting
            threading.Thread(target=export, args=(out,)).start()
        else:
            export(out)
    main_module = sys.modules["__main__"]
    with open(seen, "w") as f:
        json.dump({"argv": sys.argv, "name": __name__, "file": __file__,
                   "path0": sys.path[0], "main_is_me": getattr(main_module, "Net", None) is Net},
                  f)
    if "--raise" in argv:
        raise RuntimeError("the script failed on purpose")
    if "--exit" in argv:
        sys.exit(int(argv[argv.index("--exit") + 1]))


if __name__ == "__main__":
    main(sys.argv)
