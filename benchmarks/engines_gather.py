"""Issue 25 figure: gathering every engine's summary (``%devices --engines``).

Starts its own ipyparallel cluster of 4 engines (``ipp.Cluster(n=4)``), each with the simulated
accelerator and the extension loaded and a namespace of a small model with Adam after one step
on simdev:0 and 100 tensors on the cpu. Prints, for 2 and 4 engines:

- the gather's wall time (median of rounds) and, measured in the same rounds, the floor: one
  ``apply`` of a function that returns None on each engine through the same kind of views;
- the bytes of each engine's summary as ipyparallel sends it (its pickle) and as json;
- the engine's own work (``engine_report`` timed on the engine);
- an expanded engine's bytes (its objects, up to 200);
- the cost written out for 64 engines: bytes x 64, and time as one engine's round trip and
  report plus 64 times the client's CPU per engine (the client sends and reads one message per
  engine in turn; 64 engines on their own machines compute their reports side by side, which
  4 engines on this 2-core machine cannot).

Targets: an engine's summary <= 2 kB; gathering 4 engines' summaries <= 100 ms.
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETUP = (
    "from torchdevice_magic.testing import simulated_accelerator\n"
    "simulated_accelerator()\n"
    "import torch\n"
    "get_ipython().run_line_magic('load_ext', 'torchdevice_magic')\n"
)
NAMESPACE = (
    "model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),"
    " torch.nn.Linear(256, 10)).to('simdev:0')\n"
    "optimizer = torch.optim.Adam(model.parameters())\n"
    "model(torch.randn(4, 256, device='simdev:0')).sum().backward()\n"
    "optimizer.step()\n"
    "for i in range(100):\n"
    "    globals()[f't{i}'] = torch.randn(64, 64)\n"
)
ROUNDS = 21


def nothing() -> None:
    return None


def timed_report() -> tuple[float, int]:
    """Run on an engine: engine_report's own time and its summary's pickled bytes."""
    import pickle as engine_pickle
    import time as engine_time

    from torchdevice_magic.shell.gather import engine_report

    start = engine_time.perf_counter()
    summary = engine_report()
    return engine_time.perf_counter() - start, len(engine_pickle.dumps(summary))


def floor(client: Any, targets: list[int]) -> float:
    start = time.perf_counter()
    results = [client.direct_view(t).apply_async(nothing) for t in targets]
    for result in results:
        result.get(timeout=30)
    return time.perf_counter() - start


def measure(client: Any, targets: list[int]) -> dict[str, float]:
    from torchdevice_magic.shell.gather import gather

    view = client.direct_view(targets)
    gathers, floors, cpu = [], [], []
    for _ in range(ROUNDS):  # interleaved: the same minutes of this noisy machine
        floors.append(floor(client, targets))
        started = time.process_time()  # the client's CPU, its IO thread included
        gathered = gather(view, timeout=30)
        cpu.append(time.process_time() - started)
        assert not gathered.missing, gathered.missing
        gathers.append(gathered.seconds)
    return {
        "gather": statistics.median(gathers),
        "floor": statistics.median(floors),
        "client_cpu": statistics.median(cpu),
    }


def main() -> None:
    import ipyparallel as ipp

    from torchdevice_magic.shell.gather import gather

    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    cluster = ipp.Cluster(n=4, log_level=40)
    client = cluster.start_and_connect_sync()
    try:
        client.wait_for_engines(4, timeout=120)
        client[:].execute(SETUP, block=True)
        client[:].execute(NAMESPACE, block=True)
        gather(client, timeout=30)  # the first apply imports the module on each engine
        print(f"engines_gather: {ROUNDS} rounds, median (python {sys.version.split()[0]})")
        results = {}
        for count in (2, 4):
            results[count] = measure(client, list(range(count)))
            r = results[count]
            print(
                f"  {count} engines: gather {r['gather'] * 1000:.1f} ms, floor (apply None) "
                f"{r['floor'] * 1000:.1f} ms, ratio {r['gather'] / r['floor']:.2f}; client CPU "
                f"{r['client_cpu'] * 1000:.1f} ms   target <= 100 ms for 4"
            )
        gathered = gather(client, timeout=30, expand=[0])
        summary = dict(next(a.summary for a in gathered.answers if a.engine == 1))
        pickled, as_json = len(pickle.dumps(summary)), len(json.dumps(summary))
        rows = next(a.rows for a in gathered.answers if a.engine == 0)
        expanded = len(pickle.dumps({**summary, "rows": rows}))
        work = client[0].apply_sync(timed_report)
        print(f"  summary per engine: {pickled} B pickled, {as_json} B json   target <= 2048 B")
        print(f"  engine_report on the engine: {work[0] * 1000:.2f} ms ({len(rows)} objects)")
        print(f"  an expanded engine: {expanded} B ({len(rows)} objects)")
        # the client handles one request and one answer per engine, one after the other; the
        # engines (one per GPU, on their own machines) compute their reports side by side
        per_engine = results[4]["client_cpu"] / 4
        one_engine = work[0] + results[2]["floor"] / 2
        print(
            f"  64 engines written out: {64 * pickled / 1024:.1f} KiB per refresh; time ~ one "
            f"engine's round trip and report {one_engine * 1000:.1f} ms + 64 x client CPU per "
            f"engine {per_engine * 1000:.2f} ms = {(one_engine + 64 * per_engine) * 1000:.0f} ms"
        )
    finally:
        client.close()
        cluster.stop_cluster_sync()


if __name__ == "__main__":
    main()
