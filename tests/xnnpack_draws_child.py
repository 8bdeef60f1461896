"""One process's lowerings, then the state of torch's global generator (a subprocess of
``test_xnnpack_draws``): ``python -m tests.xnnpack_draws_child IMPL WORKERS CACHE``.

Seeds 0, lowers a linear program then a softmax program with XNNPACK (IMPL
``reference``: ExecuTorch; ``fastlower``: its lowering cache in CACHE, or none for
``-``, WORKERS preprocess workers), and prints the generator state's digest and the
report's lowering-cache status of each call.
"""

from __future__ import annotations

import hashlib
import sys

import torch


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.linear(x))


class Softmax(Linear):
    def forward(self, x):
        return torch.softmax(self.linear(x), -1)


def main(impl: str, workers: int, cache: str) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    torch.manual_seed(1)
    programs = [torch.export.export(m().eval(), (torch.ones(2, 8),)) for m in (Linear, Softmax)]
    torch.manual_seed(0)
    statuses = []
    for program in programs:
        if impl == "reference":
            from executorch.exir import to_edge_transform_and_lower

            to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
            continue
        import fastlower
        import fastlower.preprocess
        from fastlower.cache import to_edge_transform_and_lower as cached

        with fastlower.preprocess.options(workers=workers,
                                          cache_dir=None if cache == "-" else cache):
            cached(program, partitioner=[XnnpackPartitioner()])
        statuses.append(str(fastlower.last_report().lowering_cache))
    state = hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()[:16]
    print(f"rng {state} {' '.join(statuses)}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
