"""Inside the model: plain tensor attributes, tensors made in forward() without a device,
unnamed tensors from helpers. Real model code, used as a demanding user would: an in-process
IPython shell with the extension loaded, cpu + the simulated accelerator. For each situation
the diagnosis that the user sees after the failing cell names the right culprit on the right
device, its fix is valid Python, and applying the fix (and, where offered, the one-click move through the
planner) makes the same cell succeed.

What they guard against: a submodule's plain tensor attribute fixed with
``model.2.register_buffer(...)`` (a SyntaxError); a hidden state made inside ``forward()``
without a device not found at all.
"""

from __future__ import annotations

import textwrap

import pytest
from diagnosis_checks import (
    HEAD,
    apply_cell_fixes,
    assert_succeeds,
    culprit,
    failing,
    setup,
)


@pytest.mark.simulated
def test_a_left_behind_attribute_of_a_trainers_model_is_named_through_the_trainer(
    ip, shown, simulated_device
) -> None:
    """The model lives in ``trainer.model``: the attribute is named by that path, and its
    one-line fix works there (it read ``self.temperature``, with only the class fix)."""
    dev = simulated_device
    setup(
        ip,
        HEAD + "class Trainer:\n    def __init__(self, model):\n        self.model = model\n"
        "trainer = Trainer(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), Head()).to(DEV))\n"
        "x = torch.randn(2, 3, device=DEV)",
        dev,
    )
    d = failing(ip, "y = trainer.model(x)")
    assert "trainer.model[2].temperature (Tensor, 16 B, a plain tensor attribute" in shown[-1]
    assert d.fix_lines[0].source.startswith('trainer.model[2].register_buffer("temperature"')
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "y = trainer.model(x)")


@pytest.mark.simulated
def test_plain_tensor_attribute_of_a_submodule_is_named_and_fixed(
    ip, shown, simulated_device
) -> None:
    dev = simulated_device
    setup(
        ip,
        HEAD + "model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), Head()).to(DEV)\n"
        "x = torch.randn(2, 3, device=DEV)",
        dev,
    )
    d = failing(ip, "y = model(x)")
    text = shown[-1]
    # before: "Fix: model.2.register_buffer(...)" -- a SyntaxError when the user ran it
    assert "model[2].temperature (Tensor, 16 B, a plain tensor attribute of Head) is on cpu" in text
    assert culprit(d, "model[2].temperature").devices == ("cpu",)
    assert "in forward()" not in text  # forward's input h is where it should be: not listed
    assert d.fix_lines[0].source == (
        f'model[2].register_buffer("temperature", vars(model[2]).pop("temperature", model[2].temperature).to("{dev}"))'
    )
    assert d.fix_lines[1].where == "class Head.__init__"
    assert d.fix_lines[1].source == 'self.register_buffer("temperature", torch.ones(4))'
    assert "a plain tensor attribute: .to() on its module does not move it" in text
    assert d.action is None  # not a move of namespace names: no button
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "y = model(x)")
    assert "temperature" in dict(ip.user_ns["model"][2].named_buffers())
    # the class fix, applied to the source: a new model moves as a whole
    setup(ip, HEAD.replace("self.temperature = torch.ones(4)", d.fix_lines[1].source), dev)
    setup(ip, "model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), Head()).to(DEV)", dev)
    assert_succeeds(ip, "y = model(x)")


def test_submodule_paths_are_python_and_resolve_back() -> None:
    import torch.nn as nn

    from torchdevice_magic.diagnose.collect import resolve_chain, submodule_expression

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(4)

    net = nn.Module()
    net.blocks = nn.ModuleList([Block(), Block()])
    net.heads = nn.ModuleDict({"a-b": nn.Linear(4, 4), "cls": nn.Linear(4, 2)})
    net.add_module("0", nn.Linear(4, 4))  # a digit name on a plain Module: no [] there
    torch = __import__("torch")
    cases = {
        "blocks.1.norm": "net.blocks[1].norm",
        "heads.a-b": 'net.heads["a-b"]',
        "heads.cls": "net.heads.cls",
        "0": 'net.get_submodule("0")',
    }
    for path, expected in cases.items():
        expr = submodule_expression("net", net, path, torch)
        assert expr == expected
        if "get_submodule" not in expr:
            ok, obj = resolve_chain({"net": net}, expr, torch)
            assert ok and obj is net.get_submodule(path)
    assert resolve_chain({"net": net}, "net.blocks[1].norm.weight", torch)[1] is (
        net.blocks[1].norm.weight
    )


@pytest.mark.simulated
def test_hidden_state_made_in_forward_without_a_device(ip, shown, simulated_device) -> None:
    dev = simulated_device
    setup(
        ip,
        """
        import torch, torch.nn as nn
        class Tagger(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(20, 6)
                self.lstm = nn.LSTM(6, 4, batch_first=True)
            def forward(self, idx):
                e = self.emb(idx)
                h0 = torch.zeros(1, idx.shape[0], 4)
                c0 = torch.zeros(1, idx.shape[0], 4)
                o, _ = self.lstm(
                    e, (h0, c0)
                )  # a call over several lines: the whole statement is read
                return o
        tagger = Tagger().to(DEV)
        idx = torch.randint(0, 20, (2, 5), device=DEV)
        """,
        dev,
    )
    d = failing(ip, "y = tagger(idx)")
    text = shown[-1]
    # before: 'Fix: # move the tensor passed as 'hidden' to "simdev:0": x = x.to(...)'
    assert "h0 (Tensor, 32 B, in forward()) is on cpu" in text
    assert " e (" not in text  # an intermediate already on the device is not a culprit
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("frame forward", "h0 = torch.zeros(1, idx.shape[0], 4, device=idx.device)"),
        ("frame forward", "c0 = torch.zeros(1, idx.shape[0], 4, device=idx.device)"),
    ]
    assert "h0 and c0 are made in Tagger.forward() without a device" in text
    assert d.action is None  # the class must change: no button


@pytest.mark.simulated
def test_tensor_made_in_forward_fix_applied_to_the_class(ip, shown, simulated_device) -> None:
    dev = simulated_device
    source = textwrap.dedent(
        """
        import torch, torch.nn as nn
        class Gate(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
            def forward(self, x):
                mask = torch.ones(x.shape[0], 4)
                return self.fc(x) * mask
        """
    )
    setup(ip, source + "gate = Gate().to(DEV)\nx = torch.randn(3, 4, device=DEV)", dev)
    d = failing(ip, "y = gate(x)")
    assert culprit(d, "mask").devices == ("cpu",)
    (line,) = d.fix_lines
    assert line == type(line)("frame forward", "mask = torch.ones(x.shape[0], 4, device=x.device)")
    fixed = source.replace("mask = torch.ones(x.shape[0], 4)", line.source)
    setup(ip, fixed + "gate = Gate().to(DEV)", dev)
    assert_succeeds(ip, "y = gate(x)")


def test_attribute_left_behind_a_meta_module_still_gets_the_buffer_fix(ip, shown) -> None:
    # cpu + meta (no second real device): nothing real moves to meta, so the attribute is not
    # moved; the cause is still that .to("meta") left it behind, and the class fix is safe.
    setup(
        ip,
        HEAD + 'model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), Head()).to("meta")\n'
        'x = torch.randn(2, 3, device="meta")',
        "meta",
    )
    d = failing(ip, "y = model(x)")
    text = shown[-1]
    assert "model[2].temperature (Tensor, 16 B, a plain tensor attribute of Head) is on cpu" in text
    assert not d.safe
    assert ("class Head.__init__", 'self.register_buffer("temperature", torch.ones(4))') in [
        (f.where, f.source) for f in d.fix_lines
    ]
    assert 'Instead (in Head.__init__): self.register_buffer("temperature", torch.ones(4))' in text
    assert (
        "model[2].temperature is a plain tensor attribute, so .to() on its module left it" in text
    )


@pytest.mark.simulated
def test_positions_made_in_forward_follow_the_input(ip, shown, simulated_device) -> None:
    dev = simulated_device
    source = textwrap.dedent(
        """
        import torch, torch.nn as nn
        class Pos(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok = nn.Embedding(30, 8); self.pos = nn.Embedding(16, 8)
            def forward(self, ids):
                positions = torch.arange(ids.shape[1])
                return self.tok(ids) + self.pos(positions)
        """
    )
    setup(ip, source + "model = Pos().to(DEV)\nids = torch.randint(0, 30, (2, 5), device=DEV)", dev)
    d = failing(ip, "out = model(ids)")
    assert "positions (Tensor, 40 B, in forward()) is on cpu" in shown[-1]
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("frame forward", "positions = torch.arange(ids.shape[1], device=ids.device)")
    ]
    fixed = source.replace("positions = torch.arange(ids.shape[1])", d.fix_lines[0].source)
    setup(ip, fixed + "model = Pos().to(DEV)", dev)
    assert_succeeds(ip, "out = model(ids)")


@pytest.mark.simulated
def test_every_module_of_the_class_left_behind_is_fixed(ip, shown, simulated_device) -> None:
    dev = simulated_device
    setup(
        ip,
        """
        import torch, torch.nn as nn
        class Attn(nn.Module):
            def __init__(self):
                super().__init__()
                self.q = nn.Linear(4, 4)
                self.scale = torch.tensor([0.5, 0.5, 0.5, 0.5])
            def _scaled(self, t):
                return t * self.scale
            def forward(self, x):
                return self._scaled(self.q(x))
        class Enc(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([Attn(), Attn()])
            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x
        enc = Enc().to(DEV)
        x = torch.randn(2, 4, device=DEV)
        """,
        dev,
    )
    d = failing(ip, "y = enc(x)")
    text = shown[-1]
    # the attribute read in a helper method (_scaled) of the first layer
    assert "enc.layers[0].scale (Tensor, 16 B, a plain tensor attribute of Attn) is on cpu" in text
    assert "2 Attn modules in enc hold scale as a plain tensor attribute" in text
    # before: only enc.layers[0] was fixed, and the re-run failed in enc.layers[1]
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "y = enc(x)")
    assert all("scale" in dict(layer.named_buffers()) for layer in ip.user_ns["enc"].layers)


@pytest.mark.simulated
def test_a_tensor_nobody_named_from_a_helper_or_inside_a_function(
    ip, shown, simulated_device
) -> None:
    dev = simulated_device
    setup(
        ip,
        "import torch, torch.nn as nn\n"
        "def make_mask(n):\n    return torch.ones(n, 4)\n"
        "def train(model, x):\n    return model(x) * torch.ones(3, 4)\n"
        "model = nn.Linear(4, 4).to(DEV)\nx = torch.randn(3, 4, device=DEV)",
        dev,
    )
    # before: 'Fix: model.to("cpu"); x = x.to("cpu")' -- the model taken off the device
    d = failing(ip, "y = model(x) * make_mask(3)")
    assert "make_mask(3) (expression, 0 B, created in line 1) is on cpu" in shown[-1]
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("line 1", f"y = model(x) * make_mask(3).to('{dev}')")
    ]
    assert_succeeds(ip, d.fix_lines[0].source)
    # ... and made in the line of the function that failed (not its result: train is running)
    d = failing(ip, "y = train(model, x)")
    assert "torch.ones(3, 4) (expression, 0 B, in train()) is on cpu" in shown[-1]
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("frame train", f"return model(x) * torch.ones(3, 4, device='{dev}')")
    ]
    setup(ip, f"def train(model, x):\n    {d.fix_lines[0].source}", dev)
    assert_succeeds(ip, "y = train(model, x)")
    assert ip.user_ns["model"].weight.device.type != "cpu"


@pytest.mark.simulated
def test_attribute_found_when_the_method_does_not_call_it_self(ip, shown, simulated_device) -> None:
    dev = simulated_device
    setup(
        ip,
        HEAD.replace("self", "this") + "model = nn.Sequential(nn.Linear(3, 4), Head()).to(DEV)\n"
        "x = torch.randn(2, 3, device=DEV)",
        dev,
    )
    d = failing(ip, "y = model(x)")
    assert (
        "model[1].temperature (Tensor, 16 B, a plain tensor attribute of Head) is on cpu"
        in (shown[-1])
    )
    assert d.fix_lines[1].where == "class Head.__init__"
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "y = model(x)")


@pytest.mark.simulated
def test_modules_kept_in_a_plain_list_are_named_and_become_a_module_list(
    ip, shown, simulated_device
) -> None:
    dev = simulated_device
    setup(
        ip,
        """
        import torch, torch.nn as nn
        class Heads(nn.Module):
            def __init__(self):
                super().__init__()
                self.heads = [nn.Linear(3, 2), nn.Linear(3, 4)]
            def forward(self, x):
                return [head(x) for head in self.heads]
        model = Heads().to(DEV)
        x = torch.randn(2, 3, device=DEV)
        """,
        dev,
    )
    d = failing(ip, "outs = model(x)")
    # the list .to() never saw is the culprit, on the CPU; the fix keeps the accelerator
    assert culprit(d, "model.heads").devices == ("cpu",)
    assert d.target == dev
    assert d.fix_lines[0].source == (f'model.heads = torch.nn.ModuleList(model.heads).to("{dev}")')
    assert "plain Python list of modules" in d.note
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "outs = model(x)")


LIBRARY = """
import torch

class Stretch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.advance = torch.linspace(0, 1, 3)

    def forward(self, x):
        return vocoder(x, self.advance)

def vocoder(x, advance):
    return x - advance

def positions(x):
    steps = torch.arange(x.shape[-1])
    return x * steps

def keep_outputs(forward):
    def wrapped_func(*args, **kwargs):  # a decorator, as transformers wraps its forward()
        return forward(*args, **kwargs)
    return wrapped_func

class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = TinyBody()

    @keep_outputs
    def forward(self, input_ids):
        return self.body(input_ids)

class TinyBody(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(10, 4)

    def forward(self, input_ids):
        input_ids = input_ids.view(-1, input_ids.shape[-1])  # as GPT2Model.forward does
        return self.wte(input_ids)
"""


@pytest.fixture
def library_on_path(tmp_path, monkeypatch):
    """A third-party package in a ``site-packages`` folder: its frames are library frames."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    (folder / "stretchlib.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(folder))
    yield
    import sys

    sys.modules.pop("stretchlib", None)


@pytest.mark.simulated
def test_a_library_modules_plain_attribute_and_unplaced_tensor_are_named(
    ip, shown, simulated_device, library_on_path
) -> None:
    dev = simulated_device
    setup(
        ip,
        "import torch\nfrom stretchlib import Stretch, positions\n"
        "m = Stretch().to(DEV)\nspec = torch.randn(2, 3, device=DEV)",
        dev,
    )
    d = failing(ip, "out = m(spec)")
    # the library module's attribute, named through the user's variable, moved on the
    # user's side (the library's __init__ is not theirs to edit: no class fix line)
    assert culprit(d, "m.advance").devices == ("cpu",)
    assert [line.where for line in d.fix_lines] == ["cell"]
    assert d.fix_lines[0].source == (
        f'm.register_buffer("advance", vars(m).pop("advance", m.advance).to("{dev}"))'
    )
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "out = m(spec)")
    # a tensor the library makes without device=: named with the library's line; the fix
    # runs the user's own call under torch.device(...), the library line being no one's to edit
    d2 = failing(ip, "p = positions(spec)")
    assert culprit(d2, "steps").devices == ("cpu",)
    assert d2.safe and d2.action is None
    assert [(f.where, f.source) for f in d2.fix_lines] == [
        ("line 1", f'with torch.device("{dev}"): p = positions(spec)')
    ]
    assert "stretchlib.py:" in d2.note
    assert_succeeds(ip, d2.fix_lines[0].source)
    assert_succeeds(ip, "assert p.device == spec.device")
    # where the call is not a one-line statement of the cell, no fix pretends
    d3 = failing(ip, "if True:\n    p = (positions(\n        spec))")
    assert not d3.safe and f'with torch.device("{dev}")' in d3.why_no_fix


@pytest.mark.simulated
def test_a_library_models_forward_is_never_where_the_fix_goes(
    ip, shown, simulated_device, library_on_path
) -> None:
    """A transformers-style model on the device called with the cell's CPU ``input_ids``: the
    library's forward() reads a view of them as its own local of the same name. The fix moves
    them in the cell; no note tells the user to edit the library's forward(), and the view is
    not listed a second time."""
    dev = simulated_device
    setup(
        ip,
        "import torch\nfrom stretchlib import TinyLM\n"
        "model = TinyLM().to(DEV)\ninput_ids = torch.randint(0, 10, (2, 3))",
        dev,
    )
    d = failing(ip, "out = model(input_ids)")
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("cell", f'input_ids = input_ids.to("{dev}")')
    ]
    assert "inside forward()" not in d.text() and "for every call" not in d.text()
    # the library's view of input_ids is not listed beside the cell's own input_ids
    assert [c.name for c in d.culprits] == ["input_ids", "model"]
    apply_cell_fixes(ip, d)
    assert_succeeds(ip, "out = model(input_ids)")
    # token ids made by the call itself, without device=: passed into the library, not made
    # there; the fix runs the call with the device as torch's default
    d2 = failing(ip, "out = model(torch.randint(0, 10, (2, 3)))")
    assert "input_ids is passed into library code (site-packages/stretchlib.py:" in d2.note
    assert "made inside library code" not in d2.note
    assert [(f.where, f.source) for f in d2.fix_lines] == [
        ("line 1", f'with torch.device("{dev}"): out = model(torch.randint(0, 10, (2, 3)))')
    ]
    assert_succeeds(ip, d2.fix_lines[0].source)


@pytest.mark.simulated
def test_a_non_persistent_buffer_left_on_meta_is_named_and_never_called_fixed(
    ip, shown, simulated_device
) -> None:
    dev = simulated_device
    setup(
        ip,
        """
        import torch
        from torch import nn
        class Rotary(nn.Module):
            def __init__(self, dim=4):
                super().__init__()
                self.proj = nn.Linear(dim, dim)
                self.register_buffer("inv_freq", torch.arange(dim).float(), persistent=False)
            def forward(self, x):
                return self.proj(x) * self.inv_freq
        state_dict = {k: v.to(DEV) for k, v in Rotary().state_dict().items()}
        with torch.device("meta"):
            m = Rotary()
        m.load_state_dict(state_dict, assign=True)
        x = torch.randn(2, 4, device=DEV)
        """,
        dev,
    )
    d = failing(ip, "y = m(x)")
    # the buffer no state dict holds is the culprit, listed first, on meta
    assert d.culprits[0].name == "m.inv_freq" and d.culprits[0].devices == ("meta",)
    assert "m holds tensors on meta (no data): buffers inv_freq." in d.note  # not "parameters"
    assert not d.safe and "non-persistent buffer" in d.why_no_fix


@pytest.mark.simulated
def test_a_hidden_state_made_by_a_call_in_the_cell_is_moved_where_it_is_made(
    ip, shown, simulated_device
) -> None:
    dev = simulated_device
    setup(
        ip,
        """
        import torch, torch.nn as nn
        class Cell(nn.Module):
            def __init__(self):
                super().__init__()
                self.gates = nn.Linear(7, 4)
            def forward(self, x, state):
                h, c = state
                return self.gates(torch.cat([x, h], dim=1)) * c
            def init_hidden(self, n):
                return (torch.zeros(n, 4), torch.zeros(n, 4))
        cell = Cell().to(DEV)
        x = torch.randn(2, 3, device=DEV)
        """,
        dev,
    )
    d = failing(ip, "y = cell(x, cell.init_hidden(2))")
    # moving `state` inside forward() would come after `h, c = state`: the fix moves the
    # call's result in the cell, before forward() unpacks it, and nothing inside forward()
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("line 1", f"y = cell(x, tuple((t.to('{dev}') for t in cell.init_hidden(2))))")
    ]
    assert_succeeds(ip, d.fix_lines[0].source)
    assert_succeeds(ip, f"assert y.device == torch.device({dev!r})")


@pytest.mark.simulated
def test_no_button_for_a_name_the_failing_cell_makes_again(ip, shown, simulated_device) -> None:
    dev = simulated_device
    setup(ip, "import torch\nmodel = torch.nn.Linear(3, 2).to(DEV)\nx = torch.randn(4, 3)", dev)
    # the cell only reads x: moving it in the namespace fixes the re-run, so the button is offered
    d = failing(ip, "y = model(x)")
    assert d.action is not None and d.action.names == ("x",) and d.action.device == dev
    # the cell makes x again before the failing line: a re-run would undo the move -- no
    # button, while the typed fix (above the failing line) is still right
    d2 = failing(ip, "x = torch.randn(4, 3)\ny = model(x)")
    assert d2.action is None and d2.safe
    assert d2.fix == f'x = x.to("{dev}")'


@pytest.mark.simulated
def test_the_dry_run_does_not_list_a_librarys_view_of_the_cells_tensor(
    ip, shown, simulated_device, library_on_path
) -> None:
    """The dry run's fakes: the library's forward() reads a fake view of the cell's fake
    ``input_ids``; the view shares the fake's storage as a real view does, so it is not listed
    beside the cell's own ``input_ids`` (it was, as a second culprit of 0 B)."""
    from torchdevice_magic import dry_run

    setup(
        ip,
        "import torch\nfrom stretchlib import TinyLM\n"
        "model = TinyLM().to(DEV)\ninput_ids = torch.randint(0, 10, (2, 3))",
        simulated_device,
    )
    report = dry_run("out = model(input_ids)", ip.user_ns)
    assert report.diagnosis is not None, report.text()
    assert [c.name for c in report.diagnosis.culprits] == ["input_ids", "model"], report.text()
    assert [(f.where, f.source) for f in report.diagnosis.fix_lines] == [
        ("cell", f'input_ids = input_ids.to("{simulated_device}")')
    ]
