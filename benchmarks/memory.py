"""Issue figures for memory (torchdevice_magic.memory), each against a baseline of the same run.

1. The leak patterns (output history, last error's traceback, list of losses, a trainer
   object's list of losses, optimizer of a deleted model, forward-hook stash, second name): is
   the holder named (target: all), and does its release free >= 99% of the bytes the pattern
   added? "Added" is every storage the pattern created that no named variable holds (the
   baseline: StorageWeakRefs taken as the pattern made its tensors); "freed" is what is dead
   afterwards, checked per storage by weak reference (CPU), not what release() says.
2. holders() on the scan benchmark's namespace (benchmarks/_namespace.py) plus a 1,000-entry
   Out, as a ratio to a full scan of the same namespace, interleaved in the same run (target
   <= 2x).
3. Recording memory per cell (Timeline.record, after the hook's own rescan) at 2,000 objects:
   milliseconds per cell (target <= 0.5 ms), and as a ratio to the hook's rescan itself.

    python benchmarks/memory.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _namespace import build_namespace, median_ratio  # noqa: E402

from torchdevice_magic import scan  # noqa: E402
from torchdevice_magic.memory import Timeline, holders  # noqa: E402


class Made:
    """Weak references to the storages a pattern creates (the baseline: what it added)."""

    def __init__(self) -> None:
        self.refs: dict[int, tuple[StorageWeakRef, int]] = {}

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        self.refs.setdefault(storage.data_ptr(), (StorageWeakRef(storage), storage.nbytes()))
        return tensor

    def alive(self) -> int:
        return sum(n for ref, n in self.refs.values() if not ref.expired())


def pattern_history(made: Made) -> tuple[dict, str]:
    shown = made(torch.ones(1024, 1024))
    return {"Out": {7: shown}, "_": shown, "_7": shown}, "output history"


def pattern_traceback(made: Made) -> tuple[dict, str]:
    def train(batch):
        hidden = made(batch * 2)
        raise RuntimeError(f"fails after {hidden.shape}")

    try:
        train(made(torch.randn(1024, 512)))
    except RuntimeError as error:
        sys.last_type, sys.last_value, sys.last_traceback = (
            type(error), error, error.__traceback__
        )  # fmt: skip
    return {}, "traceback"


def pattern_losses(made: Made) -> tuple[dict, str]:
    model = torch.nn.Linear(256, 256)
    losses = []
    for _ in range(12):
        x = made(torch.randn(128, 256))
        out = made(model(x))
        losses.append(out.pow(2).mean())
    return {"model": model, "losses": losses}, "autograd graph"


def pattern_trainer(made: Made) -> tuple[dict, str]:
    """An evaluation loop in a trainer object keeping every batch's loss with its graph."""

    class Trainer:
        def __init__(self) -> None:
            self.model = torch.nn.Linear(256, 256)
            self.val_losses: list = []

    trainer = Trainer()
    for _ in range(12):
        x = made(torch.randn(128, 256))
        out = made(trainer.model(x))
        trainer.val_losses.append(out.pow(2).mean())
    return {"trainer": trainer}, "autograd graph"


def pattern_optimizer(made: Made) -> tuple[dict, str]:
    model = torch.nn.Linear(512, 512)
    for p in model.parameters():
        made(p)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 512)).sum().backward()
    optimizer.step()
    for p in model.parameters():
        made(p.grad)
        for value in optimizer.state[p].values():
            made(value)
    return {"opt": optimizer}, "optimizer"  # the model is gone


def pattern_hook(made: Made) -> tuple[dict, str]:
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())

    def keep_outputs():
        stash: list = []  # only the hook's closure holds it

        def hook(module, inputs, output):
            stash.append(made(output))

        return hook

    net[0].register_forward_hook(keep_outputs())
    for _ in range(8):
        net(made(torch.randn(128, 256)))
    return {"net": net}, "hook"


def pattern_second_name(made: Made) -> tuple[dict, str, Timeline]:
    namespace = {"features": made(torch.randn(1024, 512))}
    timeline = Timeline()
    timeline.record(1, scan(namespace), namespace, ["features"])
    namespace["cache"] = {"features": namespace["features"], "note": "kept"}
    timeline.record(2, scan(namespace), namespace, ["cache"])
    del namespace["features"]
    timeline.record(3, scan(namespace), namespace, ["features"])
    return namespace, "second name", timeline


def leak_patterns() -> list[tuple[str, bool, int, int, bool]]:
    results = []
    for build in (
        pattern_history,
        pattern_traceback,
        pattern_losses,
        pattern_trainer,
        pattern_optimizer,
        pattern_hook,
        pattern_second_name,
    ):
        sys.last_type = sys.last_value = sys.last_traceback = None
        made = Made()
        built = build(made)
        namespace, kind = built[0], built[1]
        forgotten = built[2].forgotten if len(built) > 2 else None
        named = scan(namespace).storages()
        added = sum(
            n
            for ptr, (ref, n) in made.refs.items()
            if not ref.expired() and ("cpu", ptr) not in named
        )
        if kind == "second name":  # the pattern's bytes are held by a (second) name
            added = made.alive()
        if kind == "optimizer":  # the optimizer's state is listed under its name, yet added
            added = made.alive()
        found = [h for h in holders(namespace, forgotten=forgotten) if h.kind == kind]
        before = made.alive()
        reported = found[0].release() if found else 0
        freed = before - made.alive()
        dead = made.alive() == 0
        results.append((build.__name__.removeprefix("pattern_"), bool(found), added, freed,
                        bool(dead), reported))  # fmt: skip
    sys.last_type = sys.last_value = sys.last_traceback = None
    return results


def holders_vs_scan() -> tuple[float, float, float]:
    namespace = build_namespace()
    out = {i: (torch.randn(16) if i % 2 else f"text {i}") for i in range(1, 1001)}
    namespace.update(Out=out, _=out[999], _999=out[999])
    # holders() scans the namespace itself (what %devices --holders costs), then looks;
    # interleaved with the scan, round by round (drifts of the shared machine cancel)
    return median_ratio(lambda: holders(namespace), lambda: scan(namespace), rounds=21)


def per_cell() -> tuple[float, float, float]:
    namespace = build_namespace()
    timeline = Timeline()
    state = {"inventory": scan(namespace), "i": 0}
    timeline.record(0, state["inventory"], namespace, [])

    def cell() -> None:  # what the hook does: the cell rebinds one tensor; rescan
        state["i"] += 1
        namespace["t5"] = torch.randn(64, 64)
        state["inventory"] = scan(namespace, previous=state["inventory"], changed=("t5",))

    def record() -> None:
        timeline.record(state["i"], state["inventory"], namespace, ["t5", "torch"])

    def rescan_only() -> None:
        scan(namespace, previous=state["inventory"], changed=("t5",))

    return median_ratio(record, rescan_only, rounds=101, before_each=cell)


def per_training_cell() -> tuple[float, float, float]:
    """For reference: a cell that mentions the model and the optimizer (their hooks and
    orphan check are looked at again), after the same rescan."""
    namespace = build_namespace()
    timeline = Timeline()
    state = {"inventory": scan(namespace), "i": 0}
    timeline.record(0, state["inventory"], namespace, [])

    def cell() -> None:
        state["i"] += 1
        namespace["t5"] = torch.randn(64, 64)
        state["inventory"] = scan(namespace, previous=state["inventory"], changed=("t5",))

    def record() -> None:
        timeline.record(state["i"], state["inventory"], namespace, ["model", "optimizer", "t5"])

    def rescan_only() -> None:
        scan(namespace, previous=state["inventory"], changed=("t5",))

    return median_ratio(record, rescan_only, rounds=41, before_each=cell)


def main() -> None:
    print("1. leak patterns: holder named, release frees the bytes the pattern added (CPU)")
    results = leak_patterns()
    for name, named, added, freed, dead, reported in results:
        share = freed / added if added else 0.0
        print(
            f"   {name:12s} named={'yes' if named else 'NO '}  added {added:>10,} B  "
            f"freed {freed:>10,} B ({share:.1%})  release() said {reported:,} B  "
            f"all storages dead: {dead}"
        )
    named = sum(r[1] for r in results)
    good = sum(1 for r in results if r[2] and r[3] / r[2] >= 0.99)
    count = len(results)
    print(f"   holders named: {named}/{count}; release freed >= 99%: {good}/{count}")

    ratio, took, floor = holders_vs_scan()
    print(
        "2. holders() on the scan benchmark's namespace + 1,000-entry Out: "
        f"{took * 1e3:.1f} ms vs full scan {floor * 1e3:.1f} ms = {ratio:.2f}x (target <= 2x)"
    )

    ratio, took, floor = per_cell()
    print(
        "3. per-cell recording at 2,000 objects: "
        f"{took * 1e3:.3f} ms per cell (target <= 0.5 ms); the hook's rescan {floor * 1e3:.3f} "
        f"ms; recording/rescan = {ratio:.2f}x"
    )
    ratio, took, floor = per_training_cell()
    print(
        "   for reference, a cell that mentions the model and the optimizer: "
        f"{took * 1e3:.3f} ms per cell ({ratio:.2f}x the rescan)"
    )


if __name__ == "__main__":
    main()
