"""What starting preprocess workers safely costs: serial vs fork pool vs spawn pool (loky).

    .venv/bin/python benchmarks/start_method_cost.py [LAYERS=8] [ROUNDS=2] [WORKERS=2]

XNNPACK on the bundled decoder, ``fastlower.to_backend`` with each start method, after a
warm-up; also the serialization a spawned worker needs (``transport``) and
the start-up of a loky pool alone. Prints one line per measurement.
"""

from __future__ import annotations

import copy
import logging
import pickle
import statistics
import sys
import time
import warnings


def main() -> None:
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    import loky
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from loky.backend.context import get_context

    import fastlower
    import fastlower.preprocess as pp
    import fastlower.preprocess.partitions as run_module
    from fastlower.frontends.examples.llama import export_llama
    from fastlower.preprocess import executors, transport

    given = sys.argv[1:]
    layers, rounds, workers = (int(a) for a in given + ["8", "2", "2"][len(given):])
    program = export_llama(layers)[0].exported_program()
    with pp.options(workers=1):  # XNNPACK's one-off set-up, outside the timings
        fastlower.to_backend(copy.deepcopy(program), XnnpackPartitioner())

    jobs = []
    serial = run_module.run_serial

    def capture(batch, done, failure):
        jobs.extend(batch)
        return serial(batch, done, failure)

    run_module.run_serial = capture
    with pp.options(workers=1):
        fastlower.to_backend(copy.deepcopy(program), XnnpackPartitioner())
    run_module.run_serial = serial
    start = time.perf_counter()
    wires = [transport.to_wire(job) for job in jobs]
    to_wire = time.perf_counter() - start
    start = time.perf_counter()
    for wire in wires:
        transport.from_wire(wire)
    from_wire = time.perf_counter() - start
    size = sum(len(pickle.dumps(w)) for w in wires)
    print(f"{layers} layers, {len(jobs)} partitions: to_wire {to_wire:.2f} s, from_wire "
          f"{from_wire:.2f} s, {size / 2**20:.1f} MiB pickled")

    start = time.perf_counter()
    pool = loky.ProcessPoolExecutor(workers, context=get_context("loky"),
                                    initializer=executors._worker_start)
    list(pool.map(transport.run_wire_job, wires[:workers]))
    pool.shutdown(wait=True)
    print(f"loky pool of {workers}: start-up + first {workers} partitions "
          f"{time.perf_counter() - start:.2f} s")

    times = {}
    for r in range(rounds):
        for label, opts in (("serial", dict(workers=1)),
                            ("fork", dict(workers=workers, start_method="fork")),
                            ("spawn", dict(workers=workers, start_method="spawn"))):
            copied = copy.deepcopy(program)
            with pp.options(**opts):
                start = time.perf_counter()
                fastlower.to_backend(copied, XnnpackPartitioner())
                took = time.perf_counter() - start
            times.setdefault(label, []).append(took)
            runner = fastlower.last_report().preprocess_runner
            print(f"round {r} {label:6s} {took:7.2f} s ({runner})", flush=True)
    for label, values in times.items():
        print(f"{label}: min {min(values):.2f} s, median {statistics.median(values):.2f} s")


if __name__ == "__main__":
    main()
