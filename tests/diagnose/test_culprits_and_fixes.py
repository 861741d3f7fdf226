"""The seeds' situations, meta standing in for cuda: who the culprits are (names the cell reads,
user frames' locals, module methods' inputs, optimizers, loaders) and the fix each one gets.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn as nn
from diagnosis_checks import TRAIN_SOURCE, define, diagnose, fresh_ns, names, run_cell
from torch.utils.data import DataLoader, TensorDataset

# --------------------------------------------------------------------------------------------
# The seeds' situations, meta standing in for cuda
# --------------------------------------------------------------------------------------------


def test_seed_model_on_device_input_on_cpu() -> None:
    ns = fresh_ns()
    cell = "model = nn.Linear(3, 2).to('meta')\nx = torch.randn(1, 3)\nout = model(x)"
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    assert d.kind == "not_on_expected_device"
    assert names(d) == {"model": ("meta",), "x": ("cpu",)}
    model = next(c for c in d.culprits if c.name == "model")
    assert (model.kind, model.bytes, model.needed_bytes) == ("Linear", 0, 32)
    x = next(c for c in d.culprits if c.name == "x")
    assert (x.kind, x.bytes, x.where, x.dtype) == ("Tensor", 12, "cell", "float32")
    assert d.target == "meta"
    assert d.fix == 'x = x.to("meta")'
    lines = d.text().splitlines()
    assert lines[0] == (
        "Device mismatch: x (Tensor, 12 B) is on cpu; model (Linear, 32 B) is on meta."
    )
    assert lines[1] == 'Fix: x = x.to("meta")   # move the small thing to where the big thing is'
    assert lines[2].startswith("Note: meta tensors hold no data")
    # the fix is real Python and really fixes the cell
    exec(d.fix, ns)
    exec("out = model(x)", ns)
    assert ns["out"].device.type == "meta"


def test_seed_model_on_cpu_input_on_device() -> None:
    ns = fresh_ns()
    cell = "model = nn.Linear(10, 2)\ninput_tensor = torch.randn(1, 10, device='meta')\nmodel(input_tensor)"
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    assert names(d) == {"model": ("cpu",), "input_tensor": ("meta",)}
    # the model is the big thing: the input follows it
    assert d.target == "cpu"
    assert d.fix == 'input_tensor = input_tensor.to("cpu")'


def test_target_given_moves_everything_there() -> None:
    ns = fresh_ns()
    cell = "model = nn.Linear(10, 2)\ninput_tensor = torch.randn(1, 10, device='meta')\nmodel(input_tensor)"
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell, target="meta")
    assert d is not None
    assert d.target == "meta"
    assert d.fix == 'model.to("meta")'  # modules move in place, no rebinding
    assert "as asked" in d.text()
    # target "cuda" (as %%devicecheck -d cuda would pass): the meta model needs to_empty
    ns2 = fresh_ns()
    cell2 = "model = nn.Linear(3, 2).to('meta')\nx = torch.randn(1, 3)\nmodel(x)"
    d2 = diagnose(run_cell(cell2, ns2), ns2, cell2, target="cuda")
    assert d2 is not None and d2.target == "cuda"
    assert d2.fix == 'model.to_empty(device="cuda"); x = x.to("cuda")'
    assert "load_state_dict" in d2.note and "to_empty" in d2.note


def test_seed_dataloader_batches_stay_on_cpu() -> None:
    ns = fresh_ns()
    setup = textwrap.dedent(
        """
        X_train = torch.randn(64, 20)
        y_train = torch.randint(0, 5, (64,))
        train_loader = DataLoader(TensorDataset(X_train, y_train), batch_size=32)
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)).to('meta')
        loss_function = nn.CrossEntropyLoss()
        """
    )
    exec(setup, ns)
    cell = textwrap.dedent(
        """
        for batch_X, batch_y in train_loader:
            output = model(batch_X)
            loss = loss_function(output, batch_y)
        """
    )
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    found = names(d)
    assert found["model"] == ("meta",)
    assert found["batch_X"] == ("cpu",)
    assert found["batch_y"] == ("cpu",)
    assert "train_loader" not in found and "loss_function" not in found  # no tensors of their own
    assert d.target == "meta"
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("loop", 'batch_X = batch_X.to("meta")'),
        ("loop", 'batch_y = batch_y.to("meta")'),
    ]
    assert 'Fix (first line inside the for loop): batch_X = batch_X.to("meta")' in d.text()


def test_seed_failure_inside_a_user_function_names_its_locals() -> None:
    ns = fresh_ns()
    define(TRAIN_SOURCE, ns)
    ns["model"] = nn.Linear(20, 5).to("meta")
    ns["loader"] = DataLoader(
        TensorDataset(torch.randn(8, 20), torch.randint(0, 5, (8,))), batch_size=4
    )
    cell = "train(model, loader)"
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    by_name = {c.name: c for c in d.culprits}
    # the cell only says "train(model, loader)": batch_X comes from train()'s frame
    assert by_name["batch_X"].devices == ("cpu",)
    assert by_name["batch_X"].where == "frame train"
    assert by_name["batch_X"].bytes == 4 * 20 * 4
    assert by_name["model"].devices == ("meta",)
    assert by_name["model"].where == "cell"  # same object as the frame's model: named once
    assert sum(c.name == "model" for c in d.culprits) == 1
    assert "loader" not in by_name
    assert d.fix_lines[0].where == "frame train"
    assert d.fix_lines[0].source == 'batch_X = batch_X.to("meta")'
    assert "batch_X (Tensor, 320 B, in train()) is on cpu" in d.text()
    assert 'Fix (inside train()): batch_X = batch_X.to("meta")' in d.text()


def test_frame_locals_found_without_a_namespace_or_cell() -> None:
    ns = fresh_ns()
    define(TRAIN_SOURCE, ns)
    ns["model"] = nn.Linear(20, 5).to("meta")
    ns["loader"] = DataLoader(
        TensorDataset(torch.randn(8, 20), torch.randint(0, 5, (8,))), batch_size=4
    )
    exc = run_cell("train(model, loader)", ns)
    d = diagnose(exc)
    assert d is not None
    assert names(d) == {"model": ("meta",), "batch_X": ("cpu",), "batch_y": ("cpu",)}
    assert {c.where for c in d.culprits} == {"frame train"}
    # the model (parameters) is the big side even when the batch has more bytes
    assert d.target == "meta"


def test_real_ipython_shell_cell_and_function_frames() -> None:
    pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    # the suite's shared test shell: clearing the singleton would break later IPython tests
    shell = get_ipython()
    try:
        shell.run_cell("import torch, torch.nn as nn", store_history=False)
        shell.run_cell(
            "def train(model, xs):\n    for batch_X in xs:\n        model(batch_X)",
            store_history=False,
        )
        shell.run_cell(
            "model = nn.Linear(3, 2).to('meta')\nxs = [torch.randn(1, 3)]", store_history=False
        )
        result = shell.run_cell("train(model, xs)", store_history=False)
        exc = result.error_in_exec
        assert exc is not None
        d = diagnose(exc, shell.user_ns, "train(model, xs)")
    finally:
        for name in ("train", "model", "xs", "nn"):
            shell.user_ns.pop(name, None)
    assert d is not None
    assert names(d) == {"model": ("meta",), "xs": ("cpu",), "batch_X": ("cpu",)}
    assert next(c for c in d.culprits if c.name == "batch_X").where == "frame train"
    # the batch is moved where it is used; the list itself (which holds it) is not
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("frame train", 'batch_X = batch_X.to("meta")')
    ]


def test_module_method_frame_uses_the_namespace_name() -> None:
    ns = fresh_ns()
    define(
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 2)

            def forward(self, inputs):
                hidden = self.enc(inputs)
                return self.head(hidden)

        def predict(batch):
            return net(batch)
        """,
        ns,
    )
    exec("net = Net().to('meta')", ns)
    ns["data"] = torch.randn(2, 4)
    exc = run_cell("predict(data)", ns)
    d = diagnose(exc, ns, "predict(data)")
    assert d is not None
    by_name = {c.name: c for c in d.culprits}
    # forward()'s self is the namespace's ``net``; hidden (an intermediate) is not listed
    assert by_name["self"].alias == "net"
    assert by_name["self"].devices == ("meta",)
    assert "hidden" not in by_name
    assert by_name["data"].where == "cell"
    assert d.fix == 'data = data.to("meta")'
    assert "net (Net, 232 B, self in forward()) is on meta" in d.text()


def test_seed_model_split_across_devices() -> None:
    ns = fresh_ns()
    cell = textwrap.dedent(
        """
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        model[2].to('meta')
        x = torch.randn(1, 4)
        model(x)
        """
    )
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    model = next(c for c in d.culprits if c.name == "model")
    assert model.devices == ("cpu", "meta")
    assert model.bytes_by_device == {"cpu": (4 * 8 + 8) * 4, "meta": (8 * 2 + 2) * 4}
    assert model.bytes == 160 and model.needed_bytes == 232
    assert "model (Sequential, 232 B) is on cpu and meta" in d.text()
    # the bigger part is on the cpu, but meta parameters cannot be copied: to_empty + reload
    assert d.target == "cpu"
    assert d.fix == 'model.to_empty(device="cpu")'
    assert "load_state_dict" in d.note
    # asked for meta: a plain move works
    d2 = diagnose(exc, ns, cell, target="meta")
    assert d2 is not None and d2.fix == 'model.to("meta"); x = x.to("meta")'


def test_submodule_on_same_devices_as_parent_is_not_repeated() -> None:
    ns = fresh_ns()
    ns["model"] = nn.Sequential(nn.Linear(3, 3)).to("meta")
    ns["x"] = torch.randn(1, 3)
    cell = "model[0](x)\nmodel(x)\nmodel.to('meta')"
    d = diagnose(RuntimeError("Tensor on device cpu is not on the expected device meta!"), ns, cell)
    assert d is not None
    assert names(d) == {"model": ("meta",), "x": ("cpu",)}


def test_attribute_chains_resolve_modules_but_not_tensor_parts() -> None:
    ns = fresh_ns()
    define(
        """
        class Holder:
            def __init__(self):
                self.encoder = nn.Linear(3, 300).to("meta")
        """,
        ns,
    )
    exec("self_like = Holder()\nmodel = nn.Sequential(nn.Linear(3, 3))\nx = torch.randn(1, 3)", ns)
    cell = "h = self_like.encoder(x.T.T)\nw = model[0].weight\nprint(x.shape, x.grad, model[0].weight.data)"
    d = diagnose(RuntimeError("Tensor on device cpu is not on the expected device meta!"), ns, cell)
    assert d is not None
    # the user's attribute chain is followed; x.T / x.grad / x.data and model[0].weight are
    # parts of things already listed
    assert names(d) == {"self_like.encoder": ("meta",), "x": ("cpu",), "model": ("cpu",)}
    assert d.target == "meta"
    assert d.fix == 'x = x.to("meta"); model.to("meta")'


def test_optimizer_state_on_another_device() -> None:
    # as after loading an optimizer checkpoint onto the CPU for a model on the device
    ns = fresh_ns()
    cell = textwrap.dedent(
        """
        model = nn.Linear(4, 4, device='meta')
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
            opt.state[p] = {'step': torch.tensor(1.0), 'exp_avg': torch.zeros(p.shape),
                            'exp_avg_sq': torch.zeros(p.shape)}
        opt.step()
        """
    )
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    opt = next(c for c in d.culprits if c.name == "opt")
    assert opt.kind == "Adam"
    assert opt.devices == ("cpu", "meta")  # params on meta, state on cpu; step counters ignored
    # the state's tensors as the scan counts them: exp_avg/exp_avg_sq plus the step counters
    assert opt.bytes_by_device == {"cpu": 2 * (16 + 4) * 4 + 2 * 4, "meta": 0}
    # optimizer state follows its parameters, although it has more bytes than the model
    assert d.target == "meta"
    assert d.fix == (
        'for s in opt.state.values(): s.update({k: v.to("meta") for k, v in s.items() '
        'if torch.is_tensor(v) and k != "step"})'
    )
    exec(d.fix, ns)
    exec("opt.step()", ns)  # fixed


def test_wrapped_device_error_is_found_through_cause_and_context() -> None:
    ns = fresh_ns()
    ns["model"] = nn.Linear(3, 2).to("meta")
    ns["x"] = torch.randn(1, 3)
    cell_cause = (
        "try:\n    model(x)\nexcept RuntimeError as e:\n    raise ValueError('step failed') from e"
    )
    d = diagnose(run_cell(cell_cause, ns), ns, cell_cause)
    assert d is not None and d.kind == "not_on_expected_device"
    assert d.message == "Tensor on device meta is not on the expected device cpu!"
    assert names(d) == {"model": ("meta",), "x": ("cpu",)}
    cell_context = "try:\n    model(x)\nexcept RuntimeError:\n    raise KeyError('oops')"
    d = diagnose(run_cell(cell_context, ns), ns, cell_context)
    assert d is not None and d.fix == 'x = x.to("meta")'


def test_rnn_hidden_state_note_and_fix() -> None:
    ns = fresh_ns()
    cell = textwrap.dedent(
        """
        lstm = nn.LSTM(3, 4)
        seq = torch.randn(2, 1, 3)
        h0 = (torch.zeros(1, 1, 4, device='meta'), torch.zeros(1, 1, 4, device='meta'))
        out, _ = lstm(seq, h0)
        """
    )
    d = diagnose(run_cell(cell, ns), ns, cell)
    assert d is not None and d.kind == "rnn_hidden"
    assert names(d)["h0"] == ("meta",)
    assert d.fix == 'h0 = tuple(t.to("cpu") for t in h0)'
    assert "hidden state" in d.note


def test_conv_dtype_mismatch_on_one_device_is_not_a_device_error() -> None:
    # conv's "Input type (double) and bias type (float)" is raised for dtype mismatches too;
    # on one device it is not ours to explain (it used to be reported as a device problem)
    ns = fresh_ns()
    cell = (
        "conv = nn.Conv2d(1, 2, 3)\nimg = torch.randn(1, 1, 5, 5, dtype=torch.float64)\nconv(img)"
    )
    exc = run_cell(cell, ns)
    assert str(exc) == "Input type (double) and bias type (float) should be the same"
    assert diagnose(exc, ns, cell) is None
    exc = run_cell("conv(torch.ones(1, 1, 5, 5, dtype=torch.long))", ns)
    assert "long int" in str(exc) or "Long" in str(exc), str(exc)
    assert diagnose(exc, ns, cell) is None


def test_conv_device_and_dtype_mismatch_fix_uses_device_and_dtype() -> None:
    ns = fresh_ns()
    ns["conv"] = nn.Conv2d(1, 2, 3).to("meta")
    ns["img"] = torch.randn(1, 1, 5, 5, dtype=torch.float16)
    msg = (
        "Input type (torch.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same"
    )
    d = diagnose(RuntimeError(msg), ns, "conv(img)", target="meta")
    assert d is not None
    assert d.fix == 'img = img.to("meta", torch.float32)'
    assert "also covers dtype mismatches" in d.note


def test_data_parallel_message_moves_the_module_to_device_ids_0() -> None:
    ns = fresh_ns()
    ns["model"] = nn.DataParallel(nn.Linear(3, 2))
    ns["x"] = torch.randn(4, 3)
    msg = (
        "module must have its parameters and buffers on device cuda:0 (device_ids[0]) but "
        "found one of them on device: cpu"
    )
    d = diagnose(RuntimeError(msg), ns, "out = model(x)")
    assert d is not None and d.kind == "data_parallel"
    assert d.target == "cuda:0"
    assert d.fix == 'model.to("cuda:0")'
    assert "device_ids[0]" in d.note and 'model.to(f"cuda:{model.device_ids[0]}")' in d.note


def test_indices_message_moves_the_index_tensor() -> None:
    ns = fresh_ns()
    ns["data"] = torch.randn(10, 3)
    ns["idx"] = torch.tensor([1, 2], device="meta")
    msg = "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
    d = diagnose(IndexError(msg), ns, "rows = data[idx]")
    assert d is not None and d.kind == "indices_device"
    assert d.fix == 'idx = idx.to("cpu")'
    assert "index tensor" in d.note


def test_meta_copy_suggests_to_empty_and_reload() -> None:
    ns = fresh_ns()
    cell = "model = nn.Linear(2, 2, device='meta')\nmodel.to('cpu')"
    d = diagnose(run_cell(cell, ns), ns, cell)
    assert d is not None and d.kind == "meta_copy"
    assert d.target == "cpu"
    assert d.fix == 'model.to_empty(device="cpu")'
    assert "model.load_state_dict(" in d.note
    exec(d.fix, ns)
    assert ns["model"].weight.device.type == "cpu"


def test_trainable_leaf_keeps_being_a_leaf() -> None:
    ns = fresh_ns()
    ns["w"] = torch.randn(3, 3, device="meta", requires_grad=True)
    ns["b"] = nn.Parameter(torch.randn(3, device="meta"))
    ns["x"] = torch.randn(8, 3)
    d = diagnose(
        RuntimeError("Tensor on device cpu is not on the expected device meta!"),
        ns,
        "y = x @ w + b",
        target="cpu",
    )
    assert d is not None
    assert d.fix_lines[0].source == 'w = w.detach().to("cpu").requires_grad_()'
    assert d.fix_lines[1].source == 'b = torch.nn.Parameter(b.detach().to("cpu"))'
    assert "optimizer" in d.note


def test_the_cpu_side_joins_the_accelerator_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    # a FakeTensor is the one way to hold a "cuda:0" tensor on this machine
    with FakeTensorMode():
        x = torch.empty(1, 3, device="cuda")
    ns = fresh_ns()
    ns["model"] = nn.Linear(3, 2)
    ns["x"] = x
    msg = (
        "Expected all tensors to be on the same device, but got mat1 is on cuda:0, different "
        "from other tensors on cpu (when checking argument in method wrapper_CUDA_addmm)"
    )
    d = diagnose(RuntimeError(msg), ns, "model(x)")
    assert d is not None
    assert names(d) == {"model": ("cpu",), "x": ("cuda:0",)}
    assert next(c for c in d.culprits if c.name == "x").kind == "FakeTensor"
    # one side is on the accelerator the user chose: the CPU side joins it, not the reverse
    assert d.target == "cuda:0"
    assert d.fix == 'model.to("cuda:0")'
    assert d.reason == "the work runs on cuda:0, as chosen: what is on the CPU joins it"
    # ... unless torch's default device names another device, or the CPU side would not fit
    from torchdevice_magic.diagnose import policy

    with monkeypatch.context() as patch:
        patch.setattr(torch, "get_default_device", lambda: torch.device("cuda", 1))
        d_default = diagnose(RuntimeError(msg), ns, "model(x)")
        assert d_default is not None and d_default.target == "cpu"
        assert d_default.reason == "torch's default device is cuda:1, not cuda:0"
        assert d_default.fix == 'x = x.to("cpu")'
    with monkeypatch.context() as patch:
        patch.setattr(policy, "free_bytes", lambda device: 4)
        d_full = diagnose(RuntimeError(msg), ns, "model(x)")
        assert d_full is not None and d_full.target == "cpu"
        assert "would not fit in cuda:0's free memory (4 B)" in d_full.reason
        assert d_full.note == 'to run on cuda:0 instead: model.to("cuda:0")'
    # with only one side known, the fix goes to the other device the message names
    ns["x"] = torch.randn(1, 3)
    d2 = diagnose(RuntimeError(msg), ns, "model(x)")
    assert d2 is not None and names(d2) == {"model": ("cpu",), "x": ("cpu",)}
    # the accelerator the message names is the other side: the CPU side joins it
    assert d2.target == "cuda:0"
    # the user's target wins and no alternative is offered
    d3 = diagnose(RuntimeError(msg), ns, "model(x)", target="cuda")
    assert d3 is not None and d3.fix == 'model.to("cuda"); x = x.to("cuda")' and d3.note == ""
