"""Who holds memory (torchdevice_magic.memory): every holder kind is found with the bytes it
really keeps (computed here from shapes), and its ``release()`` really frees: a weak reference to
the tensor (or to the storage, for Parameters) is dead afterwards, and every other variable is
exactly as it was.
"""

import contextlib
import gc
import weakref

import pytest
import torch
from memorykit import F32, by_kind, fail_inside_train
from torch.multiprocessing.reductions import StorageWeakRef

import torchdevice_magic
from torchdevice_magic.memory import (
    Timeline,
    held_outside,
    holders,
)

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


def test_the_last_error_is_named_by_the_users_frame_not_by_torchs_wrappers(last_error):
    """``model(batch)`` failing inside the user's forward(): torch's call wrappers hold the
    same batch as ``args``; the holder names the user's local, and a batch that only torch's
    (or the standard library's) own frames hold says whose frame that is."""

    class Net(torch.nn.Module):
        def forward(self, batch):
            raise RuntimeError("failed in forward")

    class Forgets(torch.nn.Module):
        def forward(self, batch):
            del batch
            raise RuntimeError("failed in forward")

    @contextlib.contextmanager
    def quietly():
        yield

    @quietly()  # the standard library's wrapper keeps the call's args
    def step(batch):
        del batch
        raise RuntimeError("failed in step")

    for model, where in [
        (Net(), "forward() local 'batch'"),
        (Forgets(), "_wrapped_call_impl() local 'args' (in torch)"),
        (step, "inner() local 'args' (in contextlib)"),
    ]:
        batch = torch.randn(256, 64)
        try:
            model(batch)
        except RuntimeError as error:
            last_error(error)
        del batch
        holder = by_kind(holders({}), "traceback")
        assert holder.where == f"last error (RuntimeError): {where}"
        assert holder.bytes == 256 * 64 * F32
        holder.release()


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
    # what --release prints after "losses: 12 autograd graphs:", without naming it twice
    assert (
        holder.note == "detached 12 tensors of losses from their autograd graphs (the values stay)"
    )
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


def test_a_model_output_dict_keeps_its_graph_and_is_not_told_to_append():
    """A transformers model returns a dict-like output (``out.loss``, ``out.logits``) whose
    tensors keep the forward's graph: nothing was appended, so the advice is the dict's own."""
    from collections import OrderedDict

    model = torch.nn.Linear(32, 8)
    logits = model(torch.randn(16, 32)).relu()  # the graph saved the input: no name holds it
    out = OrderedDict(loss=logits.pow(2).mean(), logits=logits)  # what ModelOutput is
    del logits
    holder = by_kind(holders({"model": model, "out": out}), "autograd graph")
    assert holder.where == "out: 2 autograd graphs"
    assert holder.bytes == 16 * 32 * F32
    assert "append" not in holder.fix
    assert holder.fix == (
        "del out once backward() ran (keep .item() or .detach() of the values you need)"
    )


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
