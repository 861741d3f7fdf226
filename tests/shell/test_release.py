"""Release frees what it names, in an in-process IPython shell with the extension loaded: for
each kind of holder, ``tdm.holders(get_ipython().user_ns)``, ``%devices --holders`` and
``%devices --release N`` list and free the same thing, and a weak reference to the tensor
proves it is gone (IPython keeps displayed values in ``Out``, ``_n``, ``_``/``__``/``___``,
``user_ns_hidden`` and its display hook, and the last error in ``sys.last_*`` and its
traceback for ``%debug``: every one of them must be dropped). The same through a real kernel:
tests/shell/test_release_kernel.py."""

from __future__ import annotations

import gc
import re
import sys

import pytest
from IPython.utils.capture import capture_output
from shellcells import TRAINER_KEEPING_GRAPHS

import torchdevice_magic as tdm
from torchdevice_magic.shell import get_session

#: 256 x 64 float32
BATCH_BYTES = 65536


def run(shell, cell):
    with capture_output() as captured:
        result = shell.run_cell(cell, store_history=True)
    shown = [o.data.get("text/plain", "") for o in captured.outputs]
    return result, "\n".join([captured.stdout, captured.stderr, *shown])


def display_a_tensor(ip, later_outputs: int) -> str:
    """A tensor shown as a cell's output (then ``later_outputs`` more outputs, which move it to
    ``__``/``___``); the holder's label."""
    result, _ = run(ip, "torch.randn(256, 64)")
    number = result.execution_count
    run(ip, f"refs.append(weakref.ref(Out[{number}]))")
    for value in range(later_outputs):
        run(ip, str(value))
    return f"Out[{number}]"


def fail_with_a_device_error(ip, later_cells: int) -> str:
    run(
        ip,
        "weights = torch.ones(64, device='meta')\n"
        "def train():\n"
        "    batch = torch.randn(256, 64)\n"
        "    refs.append(weakref.ref(batch))\n"
        "    return batch + weights\n",
    )
    result, shown = run(ip, "train()")
    assert "Device mismatch" in shown  # diagnosed: the short traceback path
    for value in range(later_cells):
        run(ip, f"later = {value}")
    return "last error (RuntimeError): train() local 'batch'"


def fail_with_another_error(ip) -> str:
    run(
        ip,
        "def train():\n"
        "    batch = torch.randn(256, 64)\n"
        "    refs.append(weakref.ref(batch))\n"
        "    return batch @ torch.ones(3, 3)\n",
    )
    result, shown = run(ip, "train()")
    assert not result.success and "Device mismatch" not in shown
    return "last error (RuntimeError): train() local 'batch'"


def keep_a_graph(ip) -> str:
    run(
        ip,
        "w = torch.ones(64, requires_grad=True)\n"
        "def forward():\n"
        "    batch = torch.randn(256, 64)\n"
        "    refs.append(weakref.ref(batch))\n"
        "    return (batch * w).sum()\n"
        "loss = forward()",
    )
    return "loss"


def keep_graphs_in_an_attribute(ip) -> str:
    run(ip, TRAINER_KEEPING_GRAPHS)
    return "trainer.val_losses"


def keep_a_second_name(ip) -> str:
    run(ip, "batch = torch.randn(256, 64)\nrefs.append(weakref.ref(batch))\nalias = batch")
    run(ip, "del batch")
    return "alias"


MAKERS = {
    "Out": lambda ip: display_a_tensor(ip, 0),
    "Out, two outputs later (___)": lambda ip: display_a_tensor(ip, 2),
    "a diagnosed device error": lambda ip: fail_with_a_device_error(ip, 0),
    "a device error, cells later (kept for %debug)": lambda ip: fail_with_a_device_error(ip, 2),
    "another error": fail_with_another_error,
    "an autograd graph": keep_a_graph,
    "a second name": keep_a_second_name,
    "an object's list of losses with their graphs": keep_graphs_in_an_attribute,
}


@pytest.fixture
def shell(ip):
    saved = tuple(getattr(sys, n, None) for n in ("last_type", "last_value", "last_traceback"))
    run(ip, "import torch, weakref\nrefs = []")
    yield ip
    sys.last_type, sys.last_value, sys.last_traceback = saved


def listed(ip) -> list[str]:
    _, printed = run(ip, "%devices --holders")
    return re.findall(r"^\[\d+\] (.*)$", printed, flags=re.MULTILINE)


@pytest.mark.parametrize("kind", list(MAKERS))
def test_the_magic_releases_each_kind_and_it_is_freed(shell, kind):
    label = MAKERS[kind](shell)
    lines = listed(shell)
    index = next(i for i, line in enumerate(lines) if line.startswith(label))
    assert shell.user_ns["refs"][0]() is not None  # held before the release

    _, printed = run(shell, f"%devices --release {index}")
    gc.collect()
    assert shell.user_ns["refs"][0]() is None, f"{kind}: {printed}"
    assert re.search(r"freed 64\.0 KiB", printed), printed
    assert not any(line.startswith(label) for line in listed(shell))


@pytest.mark.parametrize("kind", list(MAKERS))
def test_the_api_lists_what_the_magic_lists_and_its_release_frees(shell, kind):
    label = MAKERS[kind](shell)
    found = tdm.holders(shell.user_ns)
    # one implementation: the magic's list is the API's, holder for holder
    assert [h.line() for h in found] == listed(shell)
    holder = next(h for h in found if h.where.startswith(label))
    freed = holder.release()
    del found, holder
    gc.collect()
    assert shell.user_ns["refs"][0]() is None, kind
    assert freed >= BATCH_BYTES


def test_the_api_agrees_with_the_controller_and_the_magic_after_cells(shell):
    """After train() fails (diagnosed), cells later: the magic, the controller and the API
    all list the kept traceback, and nothing else."""
    fail_with_a_device_error(shell, 2)
    api = [h.line() for h in tdm.holders(shell.user_ns)]
    app = [h.line() for h in get_session(shell).app.holders()]
    assert api == app == listed(shell)
    assert len(api) == 1 and "train() local 'batch'" in api[0]


def test_a_released_output_leaves_nothing_in_ipython(shell):
    """Every place IPython keeps a displayed value: none keeps it after the release."""
    label = display_a_tensor(shell, 0)
    number = int(label[4:-1])
    ns, hidden, hook = shell.user_ns, shell.user_ns_hidden, shell.displayhook
    value = ns["Out"][number]
    assert hidden.get(f"_{number}") is value  # push(..., interactive=False)
    unders = ("_", "__", "___")
    in_namespace = [u for u in unders if ns.get(u) is value]
    in_hook = [u for u in unders if getattr(hook, u) is value]
    assert in_hook  # the display hook keeps it as _ (and the namespace too, unless shadowed)
    del value
    holder = next(h for h in tdm.holders(ns) if h.where.startswith(label))
    holder.release()
    assert number not in ns["Out"] and f"_{number}" not in ns and f"_{number}" not in hidden
    assert all(ns[u] == "" for u in in_namespace) and all(getattr(hook, u) == "" for u in in_hook)
    gc.collect()
    assert ns["refs"][0]() is None


def test_after_train_fails_the_api_and_the_magic_name_train_s_batch(shell):
    """A model made on meta inside train(), the batch on the cpu: torch's wrappers hold the
    batch with the meta weights beside it, which hold no memory; the holder is named by
    train()'s own local."""
    run(
        shell,
        "def train():\n"
        "    model = torch.nn.Linear(64, 8).to('meta')\n"
        "    batch_x = torch.randn(256, 64)\n"
        "    refs.append(weakref.ref(batch_x))\n"
        "    return model(batch_x)\n",
    )
    run(shell, "train()")
    run(shell, "later = 1")
    api = [h.where for h in tdm.holders(shell.user_ns)]
    assert api and api[0].startswith("last error (RuntimeError): train() local 'batch_x'")
    assert [h.line() for h in tdm.holders(shell.user_ns)] == listed(shell)


def test_a_release_that_frees_less_says_who_still_holds_the_rest(shell):
    """A loss shown as a cell's output keeps the graph ``out`` keeps too: releasing ``Out[n]``
    frees only the loss itself, and says that ``out`` still holds the graph."""
    run(shell, "layer = torch.nn.Linear(256, 256)\nout = layer(torch.randn(64, 256)).relu()")
    result, _ = run(shell, "out.sum()")
    label = f"Out[{result.execution_count}]"
    lines = listed(shell)
    index = next(i for i, line in enumerate(lines) if line.startswith(label))
    _, printed = run(shell, f"%devices --release {index}")
    assert "freed 4 B (the rest is still held by out (autograd graph))" in printed
    holder = next(h for h in tdm.holders(shell.user_ns) if h.where.startswith("out"))
    assert holder.release() == holder.bytes and holder.still_held_by == ()


def test_releasing_one_of_two_second_names_says_the_other_name_still_holds_it(shell):
    """``del features`` leaves the tensor to ``also`` and to ``cache['features']``: dropping
    one frees nothing, and the message names the variable that still holds it."""
    run(shell, "features = torch.randn(256, 64)")
    run(shell, "cache = {'features': features, 'note': 1}\nalso = features")
    run(shell, "del features")
    lines = listed(shell)
    index = next(i for i, line in enumerate(lines) if line.startswith("also (second name"))
    _, printed = run(shell, f"%devices --release {index}")
    assert "deleted also; freed 0 B (the rest is still held by cache)" in printed
