"""The memory views in the shell: per-cell timeline, leak warnings, the magics, the sidebar's
timeline message, the peak per cell and the last error kept where %debug and the holders find it.
"""

import sys

import pytest
import torch
from memorykit import F32, rows_of_cell, run, timeline_of

from torchdevice_magic.memory import (
    Timeline,
)

# -- the IPython layer: per-cell timeline, leak warnings, magics ----------------------------------


def test_per_cell_deltas_are_exactly_the_bytes_each_cell_created(ip):
    cells = [
        ("import torch", None),
        ("a = torch.zeros(1000)", 4000),
        ("b = torch.zeros(10, dtype=torch.float64)", 80),
        ("v = a.view(10, 100)", 0),  # a view: no new storage
        ("del a", 0),  # v still holds it
        ("del v", -4000),
        ("xs = []", 0),
        ("xs.append(torch.ones(25))\nxs.append(torch.ones(50))", 300),
        ("torch.ones(300)", 1200),  # kept by the output history
        ("b = torch.zeros(5, dtype=torch.float64)", -40),
        ("model = torch.nn.Linear(10, 10)", 440),
        ("model(torch.ones(1, 10)).sum().backward()", 440),  # the gradients
    ]
    for cell, created in cells:
        rows = rows_of_cell(ip, cell)
        if created is not None:
            assert sum(r.delta for r in rows) == created, (cell, rows)
    frame = ip.run_line_magic("devices", "--timeline -o")
    assert list(frame.columns) == ["cell", "device", "bytes", "delta", "peak", "grew", "action"]
    assert (frame["action"] == "").all()  # every row a cell's: nothing was moved
    assert set(frame["device"]) == {"cpu"} and frame["peak"].isna().all()  # no CUDA here
    assert frame["bytes"].iloc[-1] == 40 + 300 + 1200 + 880  # b, xs, Out, model + grads
    grew = dict(zip(frame["cell"], frame["grew"], strict=True))
    assert "Out[" in grew[frame["cell"].iloc[-4]]
    printed = run(ip, "%devices --timeline")[1]
    assert "cell" in printed and "a +3.9 KiB" in printed


def test_re_run_appending_cell_warns_and_rebinding_cell_does_not(ip):
    run(ip, "import torch\nmodel = torch.nn.Linear(64, 64)\nlosses = []")
    train = "for _ in range(4):\n    losses.append(model(torch.randn(32, 64)).pow(2).sum())"
    rebind = "x = torch.randn(512, 512)"
    _, first, _ = run(ip, train)
    _, again, _ = run(ip, train)
    assert "torchdevice_magic" not in first
    assert (
        # per step: the input (saved by addmm) and the linear's output (saved by pow)
        "losses keeps 8 autograd graphs alive, 128.0 KiB on cpu, more after every run: "
        "append loss.item() or loss.detach()"
    ) in again
    for _ in range(3):
        assert "torchdevice_magic" not in run(ip, rebind)[1]
    # the same graphs counted once: holders say the same
    holders_text = run(ip, "%devices --holders")[1]
    assert "losses: 8 autograd graphs: 128.0 KiB on cpu" in holders_text


def test_holders_and_release_from_the_magic(ip):
    run(ip, "import torch, weakref")
    run(ip, "torch.zeros(1000)")
    run(ip, "ref = weakref.ref(Out[max(Out)])")
    _, printed, _ = run(ip, "%devices --holders")
    assert "[0] Out[" in printed and "3.9 KiB on cpu" in printed
    found = ip.run_line_magic("devices", "--holders -o")
    assert [h.kind for h in found] == ["output history"]
    del found
    _, printed, _ = run(ip, "%devices --release 0")
    assert "freed 3.9 KiB" in printed
    assert ip.user_ns["ref"]() is None
    result, _, _ = run(ip, "%devices --release 5")
    assert "there are 0 holders" in str(result.error_in_exec)


def test_unload_removes_the_pre_run_cell_hook_too(ip):
    def ours(event):
        return [
            cb
            for cb in ip.events.callbacks[event]
            if getattr(cb, "__self__", None).__class__.__name__ == "DeviceSession"
        ]

    assert len(ours("pre_run_cell")) == 1 and len(ours("post_run_cell")) == 1
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert ours("pre_run_cell") == [] and ours("post_run_cell") == []
    ip.run_line_magic("load_ext", "torchdevice_magic")
    assert len(ours("pre_run_cell")) == 1


def test_failing_cell_with_out_of_memory_is_explained(ip):
    run(ip, "import torch\nbig = torch.zeros(1000, 250)")
    result, _, shown = run(ip, "torch.empty(2**40, dtype=torch.uint8)")
    assert result.error_in_exec is not None
    assert "Out of memory on cpu: the request was 1.0 TiB." in shown
    assert "big: 976.6 KiB" in shown


@pytest.mark.cuda
def test_each_cells_peak_is_its_own_on_cuda(ip):
    """The peak counter is reset before every cell: a cell that allocates 8 MiB after one that
    allocated 256 MiB shows its own peak, not the earlier cell's (without the reset it would
    show at least 260 MiB)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    mib = 2**20
    run(ip, "import torch\nx = torch.ones(1024, 1024, device='cuda')")  # 4 MiB kept
    run(ip, "big = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')\ndel big")
    run(ip, "y = torch.ones(2048, 1024, device='cuda')\ndel y")  # 8 MiB, nothing kept
    rows = [r for r in timeline_of(ip).rows if r.device == "cuda:0"]
    assert rows[-2].peak >= 260 * mib
    assert 12 * mib <= rows[-1].peak < 256 * mib


def test_every_cell_resets_the_peak_counter_of_each_initialised_device(ip, monkeypatch):
    """The reset's logic without a GPU: the accelerator is said to be initialised with two
    devices, and torch.accelerator's reset is recorded. Before each cell, each device's peak
    counter is reset once."""
    from torchdevice_magic import devices

    resets = []
    monkeypatch.setattr(devices, "accelerator_type", lambda: "cuda")
    monkeypatch.setattr(devices, "device_count", lambda kind=None: 2)
    monkeypatch.setattr(devices, "is_initialized", lambda kind: True)
    monkeypatch.setattr(
        torch.accelerator, "reset_peak_memory_stats", lambda device=None: resets.append(device)
    )
    run(ip, "a = 1")
    run(ip, "b = 2")
    assert resets == [0, 1, 0, 1]


# -- the sidebar's timeline message ------------------------------------------------------------


def test_timeline_message_is_schema_checked_and_follows_the_snapshot(ip):
    from torchdevice_magic import protocol
    from torchdevice_magic.shell import get_session

    run(ip, "import torch\nlosses = []")
    run(ip, "losses.append(torch.ones(3, requires_grad=True).exp().sum())")
    session = get_session(ip)
    message = session.app.timeline_message()
    protocol.check_timeline(message)
    last = message["rows"][-1]
    # the loss (4 B), exp's saved result (12 B) and the leaf its AccumulateGrad node keeps (12 B)
    assert last["device"] == "cpu" and last["delta"] == 4 + 12 + 12
    assert last["changes"][0][0] == "losses: 1 autograd graph"
    # what the graph keeps is said apart, so the chart agrees with the device table's total
    assert last["outside"] == 12 + 12
    shown = {bar.device: bar.bytes for bar in session.app.header().bars}
    assert last["bytes"] - last["outside"] == shown["cpu"]

    sent = []

    class Channel:  # a sidebar's comm (opening it gets the first window)
        comm_id = "fake"

        def send(self, data):
            sent.append(data)

        def on_msg(self, handler):
            pass

        def on_close(self, handler):
            pass

    session.channel._on_open(Channel(), {})
    try:
        run(ip, "losses.append(torch.ones(3, requires_grad=True).exp().sum())")
    finally:
        session.channel._detach("fake")
    # the window's delta after the cell, the memory chart's rows inside it
    assert [m["type"] for m in sent] == ["view", "delta"]
    for each in sent:
        protocol.check_message(each)
    update = sent[-1]["timeline"]
    protocol.check_timeline_update(update)
    assert update["rows"][-1]["delta"] == last["delta"]
    with pytest.raises(protocol.ProtocolError):
        protocol.check_timeline({**message, "rows": [{**last, "bytes": "12"}]})
    with pytest.raises(protocol.ProtocolError):
        protocol.check_timeline_update({**update, "rows": [{**last, "changes": [["x", "12"]]}]})


@pytest.mark.parametrize("recount_above", [2000, 0])
def test_the_timeline_s_incremental_union_equals_a_fresh_count_after_every_kind_of_cell(
    recount_above, monkeypatch
):
    """The timeline keeps the named storages up to date from the names whose entries changed
    (Inventory.changed_since / storages_of), or counts them all again when many changed (a
    full scan in between); after rebinding, deleting, aliasing, views, gradients appearing,
    modules, containers and full scans in between, it is exactly what a fresh count says."""
    from torchdevice_magic.memory import timeline as timeline_module
    from torchdevice_magic.scan import Scanner

    # patched where Timeline reads it (the package only re-exports the default)
    monkeypatch.setattr(timeline_module, "RECOUNT_ABOVE", recount_above)

    namespace: dict = {f"t{i}": torch.randn(8, 8) for i in range(30)}
    scanner = Scanner()
    timeline = Timeline()
    cells = [
        (lambda ns: ns.update(a=torch.zeros(100)), ["a"]),
        (lambda ns: ns.update(v=ns["a"].view(10, 10)), ["v", "a"]),
        (lambda ns: ns.pop("a"), ["a"]),
        (lambda ns: ns.update(t3=torch.ones(5)), ["t3"]),
        (lambda ns: ns.pop("t4"), ["t4"]),
        (lambda ns: ns.update(m=torch.nn.Linear(6, 6)), ["m"]),
        (lambda ns: ns["m"](torch.ones(1, 6)).sum().backward(), ["m", "torch"]),
        (lambda ns: ns.update(xs=[ns["t1"], torch.ones(7)]), ["xs"]),
        (lambda ns: ns["xs"].append(torch.ones(9)), ["xs"]),
        (None, []),  # a full scan in between (what %devices does)
        (lambda ns: ns.update(t5=ns["t6"]), ["t5"]),
        (lambda ns: ns.pop("m"), ["m"]),
    ]
    for index, (cell, names) in enumerate(cells):
        if cell is not None:
            cell(namespace)
        inventory = scanner.scan(namespace, changed=names, full=cell is None)
        rows, _ = timeline.record(index, inventory, namespace, names)
        expected = inventory.storages()
        assert timeline._named == expected, index
        assert {r.device: r.bytes for r in rows} == {
            d: n for d, n in inventory.totals().items() if n
        }, index


def test_a_diagnosed_device_error_is_kept_where_debug_and_holders_find_it(ip):
    """The diagnosis shows a short traceback and keeps the error where IPython's own
    traceback would (sys.last_value, for %debug); the failed function's batch is listed by
    the magic and the API alike, and released."""
    import torchdevice_magic as tdm

    saved = (
        (sys.last_type, sys.last_value, sys.last_traceback) if hasattr(sys, "last_value") else None
    )
    sys.last_type = sys.last_value = sys.last_traceback = None
    try:
        run(
            ip,
            "import torch, weakref\n"
            "weights = torch.ones(64, device='meta')\n"
            "refs = []\n"
            "def train():\n"
            "    batch = torch.randn(256, 64)\n"
            "    refs.append(weakref.ref(batch))\n"
            "    return batch + weights\n",
        )
        result, _, shown = run(ip, "train()")
        assert "is not on the expected device" in str(result.error_in_exec)
        assert "Device mismatch" in shown  # the device diagnosis was shown
        assert sys.last_value is result.error_in_exec  # where %debug and %tb look
        api = [(h.where, h.bytes) for h in tdm.holders(ip.user_ns)]
        _, printed, _ = run(
            ip, "found = %devices --holders -o\nprint(found)\nprint('freed', found[0].release())"
        )
        assert api == [("last error (RuntimeError): train() local 'batch'", 65536)]
        assert "[0] last error (RuntimeError): train() local 'batch': 64.0 KiB on cpu" in printed
        assert "freed 65536" in printed
        assert ip.user_ns["refs"][0]() is None
    finally:
        if saved is not None:
            sys.last_type, sys.last_value, sys.last_traceback = saved


def test_a_device_error_traceback_kept_for_debug_is_a_holder_after_later_cells(ip):
    """IPython keeps the last traceback for %debug after the cell is over; holders must still
    find the failed function's batch there, cells later, and release must free it."""
    from torchdevice_magic.shell import get_session

    run(ip, "import torch, weakref\nmodel = torch.nn.Linear(64, 8).to('meta')\nrefs = []")
    run(
        ip,
        "def train(model):\n    batch = torch.randn(512, 64)\n"
        "    refs.append(weakref.ref(batch))\n    return model(batch)\n",
    )
    result, _, shown = run(ip, "train(model)")
    assert not result.success and "Device mismatch" in shown
    run(ip, "x = 1")  # later cells: the failed one is over
    run(ip, "y = 2")
    assert ip.user_ns["refs"][0]() is not None  # IPython still keeps the frames
    session = get_session(ip)
    holder = next(h for h in session.app.holders() if h.kind == "traceback")
    assert "train() local 'batch'" in holder.where and holder.bytes >= 512 * 64 * F32
    assert holder.release() >= holder.bytes
    assert ip.user_ns["refs"][0]() is None  # the batch is freed
    assert all(h.kind != "traceback" for h in session.app.holders())


def test_what_grew_tells_each_new_storage_once_and_a_second_name_as_nothing(ip):
    """The "grew / shrank" column adds up to the device's change: a second name for a held
    tensor (a loop variable left on the last batch, ``b = a``) grows nothing, deleting one of
    two names shrinks nothing, and a tensor bound to two names in one cell is told once."""
    cells = [
        ("import torch\ndata = [torch.zeros(1000) for _ in range(3)]", None),
        ("for x in data:\n    pass", {}),
        ("a = torch.zeros(100)\nb = a", {"a": 400}),
        ("del a", {}),
        ("del b", {"b": -400}),
        ("xs = [torch.ones(10)]\nxs.append(torch.ones(5))", {"xs": 60}),
    ]
    for cell, grew in cells:
        rows = rows_of_cell(ip, cell)
        if grew is not None:
            told = {name: nbytes for r in rows for name, nbytes in r.changes}
            assert told == grew, (cell, rows)
            assert sum(told.values()) == sum(r.delta for r in rows), cell
