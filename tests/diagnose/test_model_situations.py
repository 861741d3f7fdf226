"""Whole-model situations: loaders, checkpoints, trainers, optimizers, %%devicecheck. Real
model code, used as a demanding user would: an in-process IPython shell with the
extension loaded, cpu + the simulated accelerator. For each situation the diagnosis that the
user sees after the failing cell names the right culprit on the right device, its fix is
valid Python, and applying the fix (and, where offered, the one-click move through the
planner) makes the same cell succeed.

What they guard against: ``%%devicecheck`` without ``-d`` saying "as asked"; a trainer
object's batch "fixed" by a comment pointing at cpu, or the button moving the trainer's model
away from its optimizer's device.
"""

from __future__ import annotations

import pytest
from diagnosis_checks import (
    TRAINER,
    apply_cell_fixes,
    assert_succeeds,
    culprit,
    failing,
    press_the_button,
    run,
    setup,
)

from torchdevice_magic.shell import get_session

# -- 2. %%devicecheck without -d -----------------------------------------------------------------


@pytest.mark.simulated
def test_devicecheck_without_a_device_does_not_say_as_asked(ip, shown, simulated_device) -> None:
    dev = simulated_device
    setup(ip, "import torch\nmodel = torch.nn.Linear(3, 2).to(DEV)\nx = torch.randn(4, 3)", dev)
    result = run(ip, "%%devicecheck\ny = model(x)")
    assert not result.success
    # before: 'Fix: x = x.to("simdev:0")   # move everything to simdev:0, as asked'
    assert shown[-1].count("Device mismatch") == 1
    # x (48 B) outweighs the model (32 B): the reason is the device chosen, not "the small thing"
    assert f'Fix: x = x.to("{dev}")   # the work runs on {dev}, as chosen' in shown[-1]
    assert "small thing" not in shown[-1]
    assert "as asked" not in shown[-1]
    # -d names the device: then it is as asked
    run(ip, "%%devicecheck -d cpu\ny = model(x)")
    assert 'model.to("cpu")' in shown[-1] and "move everything to cpu, as asked" in shown[-1]
    # a configured default device is named as such
    run(ip, "%config TorchDeviceMagic.default_device = 'cpu'")
    run(ip, "%%devicecheck\ny = model(x)")
    assert "as asked" not in shown[-1]
    assert "move everything to cpu, the configured default" in shown[-1]


# -- 3. real model code ----------------------------------------------------------------------------


@pytest.mark.simulated
@pytest.mark.parametrize(
    ("source", "cell", "name", "fix"),
    [
        (  # a transformer block with its input left on cpu
            "layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,"
            " batch_first=True).to(DEV)\nsrc = torch.randn(2, 5, 8)",
            "out = layer(src)",
            "src",
            'src = src.to("{dev}")',
        ),
        (  # ... and its padding mask
            "layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,"
            " batch_first=True).to(DEV)\nsrc = torch.randn(2, 5, 8, device=DEV)\n"
            "mask = torch.zeros(2, 5, dtype=torch.bool)",
            "out = layer(src, src_key_padding_mask=mask)",
            "mask",
            'mask = mask.to("{dev}")',
        ),
        (  # an embedding with its indices on cpu
            "emb = nn.Embedding(50, 8).to(DEV)\nidx = torch.tensor([[1, 2, 3], [4, 5, 6]])",
            "vecs = emb(idx)",
            "idx",
            'idx = idx.to("{dev}")',
        ),
        (  # the loss target left on cpu
            "model = nn.Linear(10, 3).to(DEV)\nx = torch.randn(4, 10, device=DEV)\n"
            "target = torch.tensor([0, 2, 1, 1])",
            "loss = nn.functional.cross_entropy(model(x), target)",
            "target",
            'target = target.to("{dev}")',
        ),
        (  # the optimizer state left on cpu after loading a checkpoint by hand
            "model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5)).to(DEV)\n"
            "optimizer = torch.optim.Adam(model.parameters(), lr=0.01)\n"
            "model(torch.randn(4, 10, device=DEV)).sum().backward(); optimizer.step()\n"
            "for s in optimizer.state.values():\n"
            "    s['exp_avg'] = s['exp_avg'].cpu(); s['exp_avg_sq'] = s['exp_avg_sq'].cpu()\n"
            "x = torch.randn(4, 10, device=DEV)",
            "optimizer.zero_grad(); model(x).sum().backward(); optimizer.step()",
            "optimizer",
            'for s in optimizer.state.values(): s.update({{k: v.to("{dev}") for k, v in '
            's.items() if torch.is_tensor(v) and k != "step"}})',
        ),
        (  # a dict batch (tokenizer style) passed as keyword arguments
            "class M(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.emb = nn.Embedding(30, 8); self.head = nn.Linear(8, 30)\n"
            "    def forward(self, input_ids, labels):\n"
            "        logits = self.head(self.emb(input_ids))\n"
            "        return nn.functional.cross_entropy(logits.view(-1, 30), labels.view(-1))\n"
            "model = M().to(DEV)\n"
            "batch = {'input_ids': torch.randint(0, 30, (2, 4)),"
            " 'labels': torch.randint(0, 30, (2, 4))}",
            "loss = model(**batch)",
            "batch",
            'batch = {{k: t.to("{dev}") for k, t in batch.items()}}',
        ),
    ],
    ids=[
        "transformer-input",
        "transformer-mask",
        "embedding",
        "loss-target",
        "optim",
        "dict-batch",
    ],
)
def test_model_code_fix_and_button_make_the_cell_succeed(
    ip, shown, simulated_device, source, cell, name, fix
) -> None:
    dev = simulated_device
    setup(ip, "import torch, torch.nn as nn\n" + source, dev)
    d = failing(ip, cell)
    assert shown and shown[-1].startswith("Device mismatch")
    assert "inside forward()" not in shown[-1]  # a model does not move its own inputs
    wrong = culprit(d, name)
    fix = fix.format(dev=dev)
    target = "cpu" if fix.endswith('.to("cpu")') else dev
    assert target not in wrong.devices or len(wrong.devices) > 1
    assert d.fix_lines[0].source == fix
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, cell)
    # the one-click path, from the same failure
    setup(ip, "import torch, torch.nn as nn\n" + source, dev)
    d = failing(ip, cell)
    assert d.action is not None and d.action.names[0] == name and d.action.device == target
    press_the_button(ip, d)
    assert_succeeds(ip, cell)


@pytest.mark.simulated
def test_an_lstm_left_on_the_cpu_joins_its_hidden_state_on_the_accelerator(
    ip, shown, simulated_device
) -> None:
    """The user put the hidden state on the accelerator: the LSTM and its input join it (never
    the state abandoning the device), and with the fix applied the cell runs."""
    dev = simulated_device
    setup(
        ip,
        "import torch, torch.nn as nn\n"
        "lstm = nn.LSTM(input_size=6, hidden_size=4, batch_first=True)\n"
        "seq = torch.randn(2, 3, 6)\n"
        "h0 = torch.zeros(1, 2, 4, device=DEV); c0 = torch.zeros(1, 2, 4, device=DEV)",
        dev,
    )
    d = failing(ip, "out, (hn, cn) = lstm(seq, (h0, c0))")
    assert d.target == dev
    assert culprit(d, "h0").devices == (dev,)
    assert [f.source for f in d.fix_lines] == [f'lstm.to("{dev}")', f'seq = seq.to("{dev}")']
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "out, (hn, cn) = lstm(seq, (h0, c0))")
    assert str(ip.user_ns["out"].device) == dev


@pytest.mark.simulated
def test_dataloader_batch_left_on_cpu_is_moved_in_the_loop(ip, shown, simulated_device) -> None:
    dev = simulated_device
    setup(
        ip,
        """
        import torch, torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset
        X_train = torch.randn(16, 10); y_train = torch.randn(16, 5)
        train_loader = DataLoader(TensorDataset(X_train, y_train), batch_size=8)
        model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5)).to(DEV)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """,
        dev,
    )
    cell = (
        "for batch_X, batch_y in train_loader:\n"
        "    loss = nn.functional.mse_loss(model(batch_X), batch_y)\n"
        "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n"
    )
    d = failing(ip, cell)
    assert culprit(d, "batch_X").devices == ("cpu",)
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("loop", f'batch_X = batch_X.to("{dev}")'),
        ("loop", f'batch_y = batch_y.to("{dev}")'),
    ]
    assert d.action is None  # the next batch is a new one: the code must change
    lines = cell.splitlines()
    fixed = "\n".join([lines[0], *(f"    {f.source}" for f in d.fix_lines), *lines[1:]])
    assert_succeeds(ip, fixed)


@pytest.mark.simulated
def test_half_loaded_checkpoint_moves_the_model_to_its_bigger_part(
    ip, shown, simulated_device
) -> None:
    dev = simulated_device
    setup(
        ip,
        """
        import torch, torch.nn as nn
        model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 5))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        model[0].to(DEV)  # a checkpoint loaded with part of the model on the device
        x = torch.randn(4, 10, device=DEV)
        """,
        dev,
    )
    d = failing(ip, "loss = model(x).sum()")
    assert set(culprit(d, "model").devices) == {"cpu", dev}
    assert d.fix_lines[0].source == f'model.to("{dev}")'  # in place: the optimizer stays valid
    assert d.action is not None and d.action.names == ("model",)
    assert get_session(ip).app.can_move(dev, ("model",)) is None
    weight = ip.user_ns["model"][2].weight
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "loss = model(x).sum()")
    # in place: the optimizer still holds the model's Parameters
    assert ip.user_ns["model"][2].weight is weight
    assert ip.user_ns["optimizer"].param_groups[0]["params"][2] is weight
    # the one-click path, from the same failure
    setup(
        ip,
        """
        import torch, torch.nn as nn
        model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 5))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        model[0].to(DEV)  # a checkpoint loaded with part of the model on the device
        x = torch.randn(4, 10, device=DEV)
        """,
        dev,
    )
    weight = ip.user_ns["model"][2].weight
    d = failing(ip, "loss = model(x).sum()")
    press_the_button(ip, d)
    assert_succeeds(ip, "loss = model(x).sum()")
    assert ip.user_ns["model"][2].weight is weight


@pytest.mark.simulated
def test_trainer_object_batch_follows_the_trainers_model(ip, shown, simulated_device) -> None:
    dev = simulated_device
    source = TRAINER + (
        "model = nn.Linear(10, 5).to(DEV)\n"
        "trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))\n"
        "batch = (torch.randn(4, 10), torch.randn(4, 5))"
    )
    setup(ip, source, dev)
    d = failing(ip, "loss = trainer.step(batch)")
    text = shown[-1]
    # before: 'Fix: # move every input to "cpu": x = x.to("cpu")', and a button moving
    # `trainer` (its model) to cpu
    assert f"trainer (Trainer, 220 B) is on {dev}" in text
    assert "batch (tuple of 2 tensors, 240 B) is on cpu" in text
    assert [f.source for f in d.fix_lines] == [f'batch = tuple(t.to("{dev}") for t in batch)']
    assert f'inside step(): x = x.to("{dev}"); y = y.to("{dev}")' in text
    assert d.target == dev
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "loss = trainer.step(batch)")
    setup(ip, source, dev)
    d = failing(ip, "loss = trainer.step(batch)")
    assert d.action is not None and d.action.names == ("batch",) and d.action.device == dev
    press_the_button(ip, d)
    assert_succeeds(ip, "loss = trainer.step(batch)")
    assert ip.user_ns["trainer"].model.weight.device.type == dev.split(":")[0]


@pytest.mark.simulated
def test_trainer_model_left_behind_is_moved_through_the_trainer(
    ip, shown, simulated_device
) -> None:
    dev = simulated_device
    setup(
        ip,
        TRAINER + "trainer = Trainer(nn.Linear(10, 5), None)\n"
        "trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=0.1)\n"
        "batch = (torch.randn(4, 10, device=DEV), torch.randn(4, 5, device=DEV))",
        dev,
    )
    result = run(ip, f"%%devicecheck -d {dev}\nloss = trainer.step(batch)")
    assert not result.success
    assert f'Fix: trainer.model.to("{dev}")   # move everything to {dev}, as asked' in shown[-1]
    error = run(ip, "loss = trainer.step(batch)").error_in_exec
    d = get_session(ip).app.diagnose(error, "loss = trainer.step(batch)", target=dev)
    assert [f.source for f in d.fix_lines] == [f'trainer.model.to("{dev}")']
    assert d.action is not None and d.action.names == ("trainer",)
    assert get_session(ip).app.can_move(dev, ("trainer",)) is None
    weight = ip.user_ns["trainer"].model.weight
    apply_cell_fixes(ip, d)
    assert ip.user_ns["trainer"].model.weight is weight  # the optimizer's Parameter, moved
    assert_succeeds(ip, "loss = trainer.step(batch)")


@pytest.mark.simulated
def test_loader_loop_inside_a_train_function(ip, shown, simulated_device) -> None:
    dev = simulated_device
    train = (
        "def train(model, loader, opt):\n"
        "    for xb, yb in loader:\n"
        "        loss = nn.functional.mse_loss(model(xb), yb)\n"
        "        opt.zero_grad(); loss.backward(); opt.step()\n"
        "    return loss\n"
    )
    setup(
        ip,
        "import torch, torch.nn as nn\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.randn(16, 10), torch.randn(16, 5)), batch_size=8)\n"
        "model = nn.Linear(10, 5).to(DEV)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n" + train,
        dev,
    )
    d = failing(ip, "loss = train(model, loader, opt)")
    assert culprit(d, "xb").where == "frame train"
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("frame train", f'xb = xb.to("{dev}")'),
        ("frame train", f'yb = yb.to("{dev}")'),
    ]
    assert f'Fix (inside train()): xb = xb.to("{dev}"); yb = yb.to("{dev}")' in shown[-1]
    assert d.action is None  # every batch is a new one: the function must change
    lines = train.splitlines()
    fixed = "\n".join([*lines[:2], *(f"        {f.source}" for f in d.fix_lines), *lines[2:]])
    setup(ip, fixed, dev)
    assert_succeeds(ip, "loss = train(model, loader, opt)")


@pytest.mark.simulated
def test_optimizer_state_loaded_before_the_model_moved(ip, shown, simulated_device) -> None:
    dev = simulated_device
    setup(
        ip,
        """
        import io, torch, torch.nn as nn
        model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        model(torch.randn(4, 10)).sum().backward(); optimizer.step()
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buf)
        buf.seek(0)
        # the usual order in a fresh notebook: build, load on cpu, then move the model
        model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        ckpt = torch.load(buf, map_location="cpu")
        model.load_state_dict(ckpt["model"]); optimizer.load_state_dict(ckpt["optimizer"])
        model.to(DEV)
        x = torch.randn(4, 10, device=DEV)
        """,
        dev,
    )
    cell = "optimizer.zero_grad(); loss = model(x).sum(); loss.backward(); optimizer.step()"
    d = failing(ip, cell)
    assert set(culprit(d, "optimizer").devices) == {"cpu", dev}
    assert "load it after model.to(device)" in shown[-1]
    assert d.action is not None and d.action.names == ("optimizer",)
    press_the_button(ip, d)
    assert_succeeds(ip, cell)
    state = ip.user_ns["optimizer"].state
    assert all(s["exp_avg"].device.type != "cpu" for s in state.values())


@pytest.mark.simulated
def test_adams_step_counters_on_the_cpu_are_not_state_in_the_wrong_place(
    ip, shown, simulated_device
) -> None:
    """Adam stepped on the accelerator keeps its 0-dim ``step`` counters on the CPU, as torch
    means it to. A batch left on the CPU is the culprit; the optimizer is not, and no fix
    moves its state."""
    dev = simulated_device
    setup(
        ip,
        """
        import torch, torch.nn as nn
        model = nn.Linear(8, 2).to(DEV)
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(4, 8, device=DEV)).sum().backward()
        opt.step()
        x = torch.randn(4, 8)
        """,
        dev,
    )
    # one statement (a loop): opt.step() may have run before the failing forward, so opt is
    # looked at (a cell that fails before its opt.step() line does not list opt at all)
    cell = "for _ in range(2):\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()"
    d = failing(ip, cell)
    assert culprit(d, "opt").devices == (dev,)  # with its parameters, where it belongs
    assert [line.source for line in d.fix_lines] == [f'x = x.to("{dev}")']
    assert "state" not in shown[-1]
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, cell)
    d = failing(ip, "x = x.cpu()\nloss = model(x).sum()\nloss.backward()\nopt.step()")
    assert "opt" not in {c.name for c in d.culprits}  # never reached: not involved


@pytest.mark.simulated
def test_a_batch_the_cell_moves_is_not_a_culprit(ip, shown, simulated_device) -> None:
    """``xb = x.to(dev)`` leaves ``x`` on the CPU, and no op sees it there: a resumed optimizer
    whose state stayed on the CPU is the one culprit, and the button moves nothing else (a
    dataset-sized ``x`` moved for nothing could run the card out of memory)."""
    dev = simulated_device
    setup(
        ip,
        """
        import torch, torch.nn as nn
        model = nn.Linear(8, 2)
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(4, 8)).sum().backward(); opt.step()  # state made on the cpu
        model.to(DEV)
        x = torch.randn(4, 8); y = torch.randn(4, 2)
        """,
        dev,
    )
    cell = (
        "xb, yb = x.to(DEV), y.to(DEV)\n"
        "loss = nn.functional.mse_loss(model(xb), yb)\nloss.backward()\nopt.step()"
    )
    d = failing(ip, cell)
    assert {c.name for c in d.culprits} >= {"opt", "xb", "yb"}
    assert not {"x", "y"} & {c.name for c in d.culprits}
    assert d.action is not None and d.action.names == ("opt",)
    press_the_button(ip, d)
    assert_succeeds(ip, cell)
    # the model forgotten on the cpu: its move is the whole fix, not the input's second copy
    ip.run_cell("model.cpu()")
    d = failing(ip, "out = model(x.to(DEV))")
    assert "x" not in {c.name for c in d.culprits}
    assert [line.source for line in d.fix_lines] == [f'model.to("{dev}")']
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "out = model(x.to(DEV))")


@pytest.mark.simulated
def test_a_trainable_leaf_an_optimizer_updates_keeps_its_object(
    ip, shown, simulated_device
) -> None:
    """Linear regression by hand, ``w`` and ``b`` leaves an optimizer updates: the fix swaps
    the moved data into the same objects (``w = w.detach().to(...)`` would leave Adam training
    the old ``w`` on the cpu, silently), and the cell then trains the tensors the names hold."""
    dev = simulated_device
    setup(
        ip,
        """
        import torch
        w = torch.randn(3, 1, requires_grad=True); b = torch.zeros(1, requires_grad=True)
        opt = torch.optim.Adam([w, b], lr=0.1)
        x = torch.randn(8, 3, device=DEV); y = torch.randn(8, 1, device=DEV)
        """,
        dev,
    )
    cell = "opt.zero_grad()\nloss = ((x @ w + b - y) ** 2).mean()\nloss.backward()\nopt.step()"
    d = failing(ip, cell)
    sources = [line.source for line in d.fix_lines]
    assert f'torch.utils.swap_tensors(w, w.detach().to("{dev}").requires_grad_())' in sources
    assert "rebuild any optimizer" not in shown[-1]
    # Adam before its first step holds no state: nothing of it is on any device to move
    assert "opt" not in {c.name for c in d.culprits} and "load_state_dict" not in shown[-1]
    before = ip.user_ns["w"]
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, cell)
    w, opt = ip.user_ns["w"], ip.user_ns["opt"]
    assert w is before and opt.param_groups[0]["params"][0] is w
    assert str(w.device) == dev and w.is_leaf and w.grad is not None
