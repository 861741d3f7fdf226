"""Who holds memory, what each cell added, out-of-memory errors explained (torchdevice_magic.memory).

Every holder kind is found with the bytes it really keeps (computed here from shapes), and its
``release()`` really frees: a weak reference to the tensor (or to the storage, for Parameters)
is dead afterwards, and every other variable is exactly as it was.
"""

from __future__ import annotations

import gc
import sys
import weakref

import nbformat
import pytest
import torch
from IPython.utils.capture import capture_output
from nbclient import NotebookClient
from torch.multiprocessing.reductions import StorageWeakRef

import torchdevice_magic
from torchdevice_magic.memory import (
    Holder,
    Timeline,
    explain_oom,
    held_outside,
    holders,
    parse_oom,
)

F32 = 4


def by_kind(found: list[Holder], kind: str) -> Holder:
    matches = [h for h in found if h.kind == kind]
    assert len(matches) == 1, [(h.kind, h.where) for h in found]
    return matches[0]


@pytest.fixture
def last_error():
    """Sets sys.last_value / last_traceback like IPython does after a failing cell; restores."""
    saved = {n: getattr(sys, n, None) for n in ("last_type", "last_value", "last_traceback")}

    def set_error(error: BaseException) -> None:
        sys.last_type, sys.last_value = type(error), error
        sys.last_traceback = error.__traceback__

    for name in saved:
        setattr(sys, name, None)
    yield set_error
    for name, value in saved.items():
        setattr(sys, name, value)


def fail_inside_train(batch: torch.Tensor) -> BaseException:
    def forward(x):
        hidden = x * 2  # an activation: the frame keeps it too
        raise RuntimeError(f"failed with {hidden.shape}")

    def train(batch):
        return forward(batch)

    try:
        train(batch)
    except RuntimeError as error:
        return error
    raise AssertionError("unreachable")


# -- one test per holder kind ---------------------------------------------------------------------


def test_last_error_traceback_holds_the_batch_in_every_frame_and_release_frees_it(last_error):
    keep = torch.ones(10)
    namespace = {"keep": keep}
    batch = torch.randn(256, 64)
    ref = weakref.ref(batch)
    last_error(fail_inside_train(batch))
    del batch
    gc.collect()
    assert ref() is not None  # held by train()'s and forward()'s frames, nothing else

    found = holders(namespace)
    holder = by_kind(found, "traceback")
    assert holder.where.startswith("last error (RuntimeError): ")
    assert "local 'x'" in holder.where or "local 'batch'" in holder.where
    assert holder.device == "cpu"
    assert holder.bytes == 2 * 256 * 64 * F32  # the batch once (3 frames), the activation
    assert holder.release() == 2 * 256 * 64 * F32
    assert ref() is None
    assert namespace == {"keep": keep} and torch.equal(keep, torch.ones(10))
    assert all(h.kind != "traceback" for h in holders(namespace))


def test_output_history_entry_and_its_aliases(last_error):
    shown = torch.zeros(100, 100)
    other = torch.ones(5)
    namespace = {"Out": {3: shown, 4: "text", 5: other}, "_": shown, "_3": shown, "_5": other}
    namespace["other_name"] = other  # Out[5] is also a named variable: not a holder
    ref = weakref.ref(shown)
    del shown

    holder = by_kind(holders(namespace), "output history")
    assert holder.where == "Out[3] (also _3, _)"
    assert holder.bytes == 100 * 100 * F32
    assert holder.release() == 100 * 100 * F32
    assert ref() is None
    assert namespace["Out"] == {4: "text", 5: other} and "_3" not in namespace
    assert namespace["_"] == "" and namespace["_5"] is other
    assert holders(namespace) == []


def test_a_list_of_losses_keeps_every_step_s_graph(last_error):
    model = torch.nn.Linear(32, 32)
    losses, activations = [], []
    for _ in range(12):
        x = torch.randn(16, 32)
        hidden = torch.relu(model(x))  # saved by pow (and relu's own result)
        activations.append(weakref.ref(hidden))
        losses.append(hidden.pow(2).sum())
    values = [loss.item() for loss in losses]
    del x, hidden
    namespace = {"model": model, "losses": losses}

    holder = by_kind(holders(namespace), "autograd graph")
    assert holder.where == "losses: 12 autograd graphs"
    # per step: the input x (saved by addmm for the weight's gradient) and relu's output
    assert holder.bytes == 12 * 2 * 16 * 32 * F32
    weight = model.weight.detach().clone()
    assert holder.release() == 12 * 2 * 16 * 32 * F32
    assert all(ref() is None for ref in activations)
    # the losses are still there, with their values; the model is untouched
    assert [loss.item() for loss in namespace["losses"]] == values
    assert torch.equal(model.weight, weight) and namespace["model"] is model


def test_a_single_loss_keeps_its_graph():
    x = torch.randn(64, 128, requires_grad=True)
    hidden = x.exp()
    ref = weakref.ref(hidden)
    loss = hidden.sum()
    del hidden
    namespace = {"loss": loss, "x": x}
    holder = by_kind(holders(namespace), "autograd graph")
    assert holder.where == "loss (autograd graph)"
    assert holder.bytes == 64 * 128 * F32  # exp saves its result; x is named
    assert holder.release() == 64 * 128 * F32
    assert ref() is None and namespace["loss"] is loss and loss.grad_fn is None


def test_optimizer_of_a_deleted_model_holds_its_parameters_gradients_and_state():
    kept = torch.nn.Linear(4, 4)
    gone = torch.nn.Linear(64, 64)
    optimizer = torch.optim.Adam([*kept.parameters(), *gone.parameters()])
    (kept(torch.randn(2, 4)).sum() + gone(torch.randn(2, 64)).sum()).backward()
    optimizer.step()
    state = weakref.ref(optimizer.state[gone.weight]["exp_avg"])
    storage = StorageWeakRef(gone.weight.untyped_storage())  # no weakref to a Parameter
    del gone
    namespace = {"model": kept, "opt": optimizer}

    holder = by_kind(holders(namespace), "optimizer")
    assert holder.where == "opt: state of parameters no variable holds"
    parameters = (64 * 64 + 64) * F32
    # parameters + gradients + exp_avg + exp_avg_sq, and two 0-dim step counters
    assert holder.bytes == 4 * parameters + 2 * F32
    assert holder.release() == 4 * parameters + 2 * F32
    assert state() is None and storage.expired()
    # the optimizer still trains the model that is still there
    assert [p for g in optimizer.param_groups for p in g["params"]] == list(kept.parameters())
    before = kept.weight.detach().clone()
    kept(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    assert not torch.equal(kept.weight, before)


def test_forward_hook_closure_stashing_outputs():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())

    def make_hook():
        stash = []

        def hook(module, inputs, output):
            stash.append(output)

        return hook

    model[0].register_forward_hook(make_hook())
    refs = []
    for _ in range(5):
        out = model(torch.randn(8, 16))
        refs.append(weakref.ref(out))
    del out
    namespace = {"model": model}
    holder = by_kind(holders(namespace), "hook")
    assert holder.where == "model.0 forward hook closure"
    # five stashed outputs, and each one's graph keeps its input (saved by addmm)
    assert holder.bytes == 5 * 2 * 8 * 16 * F32
    assert holder.release() == 5 * 2 * 8 * 16 * F32
    assert not model[0]._forward_hooks
    model(torch.randn(8, 16))  # still works
    assert holders(namespace) == []


def test_objects_holding_tensors_in_attributes():
    """Named, such an object is a named variable (the scan walks attributes); reachable only
    through a hook's bound method, it is that hook's holder."""

    class Trainer:
        pass

    class Recorder:
        def __init__(self):
            self.outputs = []

        def hook(self, module, inputs, output):
            self.outputs.append(output.detach())

    trainer = Trainer()
    trainer.last_batch = torch.zeros(50, 50)
    model = torch.nn.Linear(25, 25)
    model.register_forward_hook(Recorder().hook)
    outputs = [model(torch.randn(4, 25)) for _ in range(3)]
    storages = [StorageWeakRef(out.untyped_storage()) for out in outputs]  # the stash's too
    del outputs
    assert not any(ref.expired() for ref in storages)
    namespace = {"trainer": trainer, "model": model}
    assert torchdevice_magic.scan(namespace).totals()["cpu"] >= 50 * 50 * F32
    holder = by_kind(holders(namespace), "hook")
    assert holder.where == "model forward hook closure"
    assert holder.bytes == 3 * 4 * 25 * F32  # the detached outputs (same storages)
    assert holder.release() == 3 * 4 * 25 * F32
    assert all(ref.expired() for ref in storages)
    assert [h.kind for h in holders(namespace)] == []
    assert trainer.last_batch.shape == (50, 50)


def test_second_name_of_a_deleted_name():
    namespace: dict = {"torch": torch}
    timeline = Timeline()
    namespace["big"] = torch.zeros(1000)
    ref = weakref.ref(namespace["big"])
    timeline.record(1, torchdevice_magic.scan(namespace), namespace, ["big"])
    namespace["cache"] = namespace["big"]
    timeline.record(2, torchdevice_magic.scan(namespace), namespace, ["cache", "big"])
    del namespace["big"]
    rows, _ = timeline.record(3, torchdevice_magic.scan(namespace), namespace, ["big"])
    assert rows[0].delta == 0
    assert "del big freed nothing of 3.9 KiB" in rows[0].note

    holder = by_kind(holders(namespace, forgotten=timeline.forgotten), "second name")
    assert holder.where == "cache (second name: still holds deleted big)"
    assert holder.bytes == 4000
    assert holder.release() == 4000
    assert ref() is None and "cache" not in namespace and namespace["torch"] is torch


def test_releasing_one_holder_leaves_every_other_holder_and_variable_intact(last_error):
    model = torch.nn.Linear(8, 8)
    losses = [model(torch.randn(4, 8)).sum() for _ in range(3)]
    shown = torch.zeros(300)
    namespace = {"model": model, "losses": losses, "Out": {7: shown}, "_7": shown}
    last_error(fail_inside_train(torch.ones(40, 40)))
    del shown
    before = {h.where: h.bytes for h in holders(namespace)}
    assert set(before) == {
        "losses: 3 autograd graphs",
        "Out[7] (also _7)",
        next(w for w in before if w.startswith("last error")),
    }
    weight = model.weight.detach().clone()
    for where in list(before):
        holder = next(h for h in holders(namespace) if h.where == where)
        assert holder.release() == before.pop(where)
        assert {h.where: h.bytes for h in holders(namespace)} == before
        assert torch.equal(namespace["model"].weight, weight)
        assert namespace["losses"] is losses and len(losses) == 3


def test_device_filter_and_the_totals_outside_named_variables():
    shown = torch.zeros(10)
    namespace = {"Out": {1: shown}}
    assert [h.device for h in holders(namespace, "cpu")] == ["cpu"]
    assert holders(namespace, "cuda") == [] and holders(namespace, "cuda:0") == []
    assert held_outside(holders(namespace)) == {"cpu": 40}


def test_hostile_objects_are_skipped():
    class Hostile:
        def __getattr__(self, name):
            raise RuntimeError("no")

        @property
        def tensor(self):
            raise RuntimeError("never call me")

    namespace = {"h": Hostile(), "gen": (i for i in range(3)), "x": torch.ones(2)}
    assert holders(namespace) == []
    assert list(namespace["gen"]) == [0, 1, 2]  # the generator was not consumed


# -- out of memory ---------------------------------------------------------------------------------

#: the caching allocator's texts, as torch 2.0 .. 2.14 print them (c10/cuda/CUDACachingAllocator.cpp)
CUDA_TEXTS = [
    # <= 2.0
    (
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
        "14.56 GiB already allocated; 3.06 MiB free; 14.69 GiB reserved in total by PyTorch) "
        "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
        "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        dict(device="cuda:0", request=20 << 20, allocated=round(14.56 * (1 << 30))),
    ),
    # 2.1 (with its "capacty" typo and max_split_size_mb advice)
    (
        "CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacty of 23.69 GiB "
        "of which 7.11 GiB is free. Process 2006998 has 256.00 MiB memory in use. Including "
        "non-PyTorch memory, this process has 16.31 GiB memory in use. Of the allocated memory "
        "16.01 GiB is allocated by PyTorch, and 7.47 MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
        "and PYTORCH_CUDA_ALLOC_CONF",
        dict(device="cuda:0", request=8 << 30, other_processes=256 << 20),
    ),
    # 2.2 .. 2.5
    (
        "CUDA out of memory. Tried to allocate 1.22 GiB. GPU 1 has a total capacity of 15.77 GiB "
        "of which 959.44 MiB is free. Including non-PyTorch memory, this process has 14.83 GiB "
        "memory in use. Of the allocated memory 14.01 GiB is allocated by PyTorch, and 472.05 "
        "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        dict(device="cuda:1", request=round(1.22 * (1 << 30)), free=round(959.44 * (1 << 20))),
    ),
    # 2.6+: private pools (CUDA graphs), per-process fraction, docs.pytorch.org link
    (
        "CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacity of 83.05 "
        "GiB of which 140.38 MiB is free. Including non-PyTorch memory, this process has 23.33 "
        "GiB memory in use. 40.00 GiB allowed; Of the allocated memory 21.92 GiB is allocated "
        "by PyTorch, with 104.00 MiB allocated in private pools (e.g., CUDA Graphs), and 797.79 "
        "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/"
        "docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
        dict(device="cuda:0", request=768 << 20, private_pools=104 << 20, allowed=40 << 30),
    ),
    # small requests are printed in bytes / KiB
    (
        "CUDA out of memory. Tried to allocate 512 bytes. GPU 0 has a total capacity of "
        "47.53 GiB of which 896.00 KiB is free. Process 1686436 has 47.51 GiB memory in use. "
        "Of the allocated memory 47.00 GiB is allocated by PyTorch, and 149.10 MiB is reserved "
        "by PyTorch but unallocated.",
        dict(device="cuda:0", request=512, free=896 << 10),
    ),
    (
        "XPU out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.00 GiB "
        "of which 1.00 GiB is free. Of the allocated memory 13.00 GiB is allocated by PyTorch, "
        "and 512.00 MiB is reserved by PyTorch but unallocated. Please use `empty_cache` to "
        "release all unoccupied cached memory.",
        dict(device="xpu:0", request=2 << 30, reserved_unallocated=512 << 20),
    ),
    (
        "MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB, max "
        "allowed: 18.13 GB). Tried to allocate 256.00 MB on private pool. Use "
        "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations",
        dict(device="mps", request=256 << 20, allocated=17 << 30),
    ),
]


@pytest.mark.parametrize(("message", "expected"), CUDA_TEXTS)
def test_out_of_memory_texts_are_parsed(message, expected):
    facts = parse_oom(f"torch.OutOfMemoryError: {message}")
    assert facts is not None
    for name, value in expected.items():
        assert getattr(facts, name) == value, name


def test_reserved_unallocated_and_non_pytorch_memory_from_the_text():
    facts = parse_oom(CUDA_TEXTS[2][0])
    mib, gib = 1 << 20, 1 << 30
    assert facts.reserved_unallocated == round(472.05 * mib)
    process, allocated = round(14.83 * gib), round(14.01 * gib)
    assert facts.non_pytorch == process - allocated - round(472.05 * mib)
    assert facts.total == round(15.77 * gib)


def test_other_errors_are_not_out_of_memory():
    assert parse_oom("Expected all tensors to be on the same device") is None
    assert explain_oom(ValueError("nope"), {}) is None


def test_a_real_cpu_allocation_failure_explained_in_process(last_error):
    big = torch.zeros(1000, 250)
    history = torch.ones(2000)
    namespace = {"big": big, "small": torch.ones(3), "Out": {2: history}}
    del history
    with pytest.raises(RuntimeError) as caught:
        torch.empty(2**40, dtype=torch.uint8)
    explanation = explain_oom(caught.value, namespace)
    assert explanation.facts.device == "cpu" and explanation.facts.request == 2**40
    assert explanation.biggest[0] == ("big", 1_000_000)
    assert [h.where for h in explanation.holders] == ["Out[2]"]
    text = explanation.text()
    assert "Out of memory on cpu: the request was 1.0 TiB." in text
    assert "Out[2]: 7.8 KiB -> %devices --release 0" in text
    assert "freeing memory cannot help" in text  # 1 TiB is more than this machine has
    assert "Out" in namespace and namespace["Out"][2] is not None  # nothing freed by itself


# -- the IPython layer: per-cell timeline, leak warnings, magics ----------------------------------


def run(shell, cell):
    with capture_output() as captured:
        result = shell.run_cell(cell, store_history=True)
    texts = [o.data.get("text/plain", "") for o in captured.outputs]
    return result, captured.stdout + captured.stderr, "\n".join(texts)


def timeline_of(shell):
    from torchdevice_magic.shell import get_session

    return get_session(shell).app.timeline


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
        result, _, _ = run(ip, cell)
        assert result.success, cell
        if created is None:
            continue
        rows = [r for r in timeline_of(ip).rows if r.cell == result.execution_count]
        delta = sum(r.delta for r in rows)
        assert delta == created, (cell, rows)
    frame = ip.run_line_magic("devices", "--timeline -o")
    assert list(frame.columns) == ["cell", "device", "bytes", "delta", "peak", "grew"]
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


# -- a real kernel -------------------------------------------------------------------------------


def notebook(*cells: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return nb


def outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output["text"])
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
        elif output.get("output_type") == "error":
            parts.append(f"{output['ename']}: {output['evalue']}")
    return "\n".join(parts)


@pytest.mark.kernel
def test_real_kernel_cpu_oom_and_a_batch_held_by_a_failed_train():
    nb = notebook(
        "%load_ext torchdevice_magic",
        "import torch, weakref\n"
        "weights = torch.zeros(500, 500)\n"
        "made = []\n"
        "def batches():\n"
        "    for _ in range(3):\n"
        "        batch = torch.randn(128, 1024)\n"
        "        made.append(weakref.ref(batch))\n"
        "        yield batch\n"
        "def train(loader):\n"
        "    for batch in loader:\n"
        "        out = batch @ weights[:0]  # shapes do not match: fails on the first batch\n",
        "train(batches())",
        "%devices --holders",
        "%devices --release 0",
        "print('batch freed:', all(ref() is None for ref in made))",
        "torch.ones(512, 256)",  # displayed: Out holds 512.0 KiB
        "torch.empty(2**40, dtype=torch.uint8)",
    )
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    listed = outputs_text(nb.cells[3])
    assert "[0] last error (RuntimeError): train() local 'batch'" in listed
    assert "512.0 KiB on cpu" in listed  # one 128x1024 float32 batch
    assert "freed 512.0 KiB" in outputs_text(nb.cells[4])
    assert "batch freed: True" in outputs_text(nb.cells[5])
    oom = outputs_text(nb.cells[7])
    assert "Out of memory on cpu: the request was 1.0 TiB." in oom
    assert "Biggest named objects on cpu:\n  weights: 976.6 KiB" in oom
    assert "Held outside named variables on cpu:\n  [0] Out[7] (also _7, _): 512.0 KiB" in oom
    assert "-> %devices --release 0" in oom and "nothing was freed for you" in oom


# -- CUDA (skipped without a GPU; ./dev gpu-check runs these) ---------------------------------------


@pytest.mark.cuda
def test_real_cuda_oom_explained_with_allocator_figures_and_the_cell_peak(ip):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    run(ip, "import torch\nx = torch.ones(1024, 1024, device='cuda')")  # initialises CUDA
    run(ip, "y = torch.ones(2048, 1024, device='cuda')\ndel y")  # 8 MiB peak, nothing kept
    rows = [r for r in timeline_of(ip).rows if r.device == "cuda:0"]
    assert rows[-1].delta == 0 and rows[-1].peak >= 4 * 2**20 + 8 * 2**20
    assert rows[-1].allocated >= 4 * 2**20
    total = torch.cuda.get_device_properties(0).total_memory
    result, _, shown = run(ip, f"torch.empty({2 * total}, dtype=torch.uint8, device='cuda')")
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    facts = parse_oom(str(result.error_in_exec))
    assert facts.device == "cuda:0" and abs(facts.request - 2 * total) <= 0.01 * total
    assert "Out of memory on cuda:0" in shown and "x: 4.0 MiB" in shown
    assert "Reserved by PyTorch but unallocated" in shown


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

    class Channel:  # a sidebar's comm (protocol v2: opening it gets the first window)
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
    # the window's delta after the cell, then the memory chart's rows
    assert [m["type"] for m in sent] == ["view", "delta", "timeline"]
    for message in sent:
        protocol.check_message(message)
    with pytest.raises(protocol.ProtocolError):
        protocol.check_timeline({**message, "rows": [{**last, "bytes": "12"}]})


# -- a second device that keeps data (the simulated accelerator) ----------------------------------


@pytest.mark.simulated
def test_holders_and_timeline_per_device_on_an_accelerator(simulated_device: str, last_error):
    from torchdevice_magic.devices import accelerator_type

    assert simulated_device.startswith(accelerator_type())
    shown = torch.ones(256, 256, device=simulated_device)  # 256 KiB on the accelerator
    on_cpu = torch.ones(10)
    namespace = {"Out": {4: shown}, "_4": shown, "x": on_cpu}
    timeline = Timeline()
    rows, _ = timeline.record(4, torchdevice_magic.scan(namespace), namespace, ["x"])
    held = {r.device: r.bytes for r in rows}
    assert held == {"cpu": 40, simulated_device: 256 * 256 * F32}

    found = holders(namespace, simulated_device)
    assert [(h.where, h.device, h.bytes) for h in found] == [
        ("Out[4] (also _4)", simulated_device, 256 * 256 * F32)
    ]
    assert holders(namespace, "cpu") == []
    assert [h.where for h in holders(namespace, accelerator_type())] == ["Out[4] (also _4)"]
    ref = weakref.ref(shown)
    del shown
    assert found[0].release() == 256 * 256 * F32
    assert ref() is None and namespace["x"] is on_cpu
    rows, _ = timeline.record(5, torchdevice_magic.scan(namespace), namespace, [])
    assert {r.device: r.delta for r in rows} == {"cpu": 0, simulated_device: -256 * 256 * F32}


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
