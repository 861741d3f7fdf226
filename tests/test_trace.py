"""trace(): the first op that mixes devices (line, function, module path, variable names),
copies between devices and host reads per line, on cpu + the simulated accelerator (and meta
where meta is honest); tracing changes no value and always removes its modes.

Tests marked ``simulated`` run in the one child process that registers the simulated
accelerator (see conftest.py)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from torchdevice_magic.trace import Tracer, TraceReport, trace

MISMATCH = "Expected all tensors to be on the same device"


def cell(source: str) -> str:
    return textwrap.dedent(source).lstrip("\n")


def no_modes_left() -> bool:
    hooks = torch.nn.modules.module
    return (
        not _get_current_dispatch_mode_stack()
        and not _get_current_function_mode_stack()
        and not hooks._global_forward_pre_hooks
        and not hooks._global_forward_hooks
    )


# -- the proof, on the simulated accelerator -------------------------------------------

MOVE_THEN_MIX = cell(
    """
    a = torch.randn(4, 8)
    b = torch.randn(4, 8)
    a_dev = a.to(DEV)
    c = b * 2
    d = a_dev + b
    e = "never reached"
    """
)


@pytest.mark.simulated
def test_a_move_at_line_3_and_a_mix_at_line_5(simulated_device: str) -> None:
    namespace = {"torch": torch, "DEV": simulated_device}
    report = trace(MOVE_THEN_MIX, namespace)

    assert [(t.line, t.source, t.target, t.count, t.bytes) for t in report.transfers] == [
        (3, "cpu", simulated_device, 1, 4 * 8 * 4)
    ]
    assert report.transfers[0].names == ("a",)
    d = report.first_divergence
    assert d is not None
    assert (d.line, d.function, d.op, d.module) == (5, "<cell>", "add.Tensor", None)
    assert d.names == ("a_dev", "b")
    assert d.devices == ("cpu", simulated_device)
    assert d.raised and d.source == "d = a_dev + b"
    # the cell's error is kept; everything before it is reported, nothing after it ran
    assert isinstance(report.error, RuntimeError) and MISMATCH in str(report.error)
    assert "e" not in namespace and torch.equal(namespace["c"], namespace["b"] * 2)
    assert no_modes_left()

    text = report.text()
    assert "First divergence: line 5: add.Tensor failed mixing a_dev (4×8) on " in text
    assert "b (4×8) on cpu" in text and "    d = a_dev + b" in text
    assert f"line 3     cpu -> {simulated_device} a: 1 copy, 128 B" in text


def step_in_a_file(x, w, device):
    y = x.to(device)
    z = w * 2
    return y + z


@pytest.mark.simulated
def test_the_same_inside_a_user_function(simulated_device: str) -> None:
    source = cell(
        """
        def step(x, w):
            y = x.to(DEV)
            z = w * 2
            return y + z
        a = torch.randn(3)
        b = torch.randn(3)
        out = step(a, b)
        """
    )
    report = trace(source, {"torch": torch, "DEV": simulated_device})
    d = report.first_divergence
    assert (d.function, d.line, d.names) == ("step", 4, ("y", "z"))
    assert d.source == "return y + z"
    [copy] = report.transfers
    assert (copy.function, copy.line, copy.names, copy.bytes) == ("step", 2, ("x",), 12)
    assert "First divergence: step() line 4: add.Tensor" in report.text()

    # a function from a file: its own name, file and line
    namespace = {"torch": torch, "DEV": simulated_device, "step": step_in_a_file}
    report = trace("a = torch.randn(3)\nout = step(a, torch.ones(3), DEV)\n", namespace)
    d = report.first_divergence
    first_line = step_in_a_file.__code__.co_firstlineno
    assert (d.function, d.line, d.names) == ("step_in_a_file", first_line + 3, ("y", "z"))
    assert d.filename == __file__
    assert f"step_in_a_file() test_trace.py line {first_line + 3}" in report.text()


NESTED_MODEL = cell(
    """
    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)
            self.register_buffer("scale", torch.ones(8))
        def forward(self, x):
            h = self.proj(x)
            return h * self.scale
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention()
        def forward(self, x):
            return self.attn(x)
    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(Layer() for _ in range(4))
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder()
        def forward(self, x):
            return self.encoder(x)
    model = Model()
    model.to(DEV)
    model.encoder.layers[3].attn.scale = torch.ones(8)  # a buffer left on the cpu
    out = model(torch.randn(2, 8, device=DEV))
    """
)


@pytest.mark.simulated
def test_the_same_inside_a_module_forward_names_the_module_path(simulated_device: str) -> None:
    report = trace(NESTED_MODEL, {"torch": torch, "DEV": simulated_device})
    d = report.first_divergence
    assert d.module == "model.encoder.layers.3.attn"
    assert (d.function, d.line, d.op) == ("forward", 8, "mul.Tensor")
    assert d.names == ("h", "model.encoder.layers.3.attn.scale")
    assert d.devices == ("cpu", simulated_device)
    assert "in model.encoder.layers.3.attn: mul.Tensor failed mixing" in report.text()
    # the layers before ran on the device, each in its own module
    assert report.modules["model.encoder.layers.0.attn.proj"] >= 1
    assert report.modules["model.encoder.layers.2.attn"] >= 1
    # model.to(DEV): every parameter and buffer copied once, from one line: no loop hint
    [move] = report.transfers
    assert move.line == 30 and move.count == 4 * 3 and not move.repeated
    assert move.names[0] == "model.encoder.layers.0.attn.proj.weight"
    assert not report.hints()
    assert no_modes_left()


ITEM_LOOP = cell(
    """
    x = torch.arange(10.0, device=DEV)
    total = 0.0
    for i in range(10):
        total += x[i].item()
    """
)


@pytest.mark.simulated
def test_a_loop_calling_item_10_times_is_10_host_reads_on_its_line(simulated_device: str) -> None:
    namespace = {"torch": torch, "DEV": simulated_device}
    report = trace(ITEM_LOOP, namespace)
    assert report.error is None and namespace["total"] == 45.0
    [reads] = report.host_reads
    assert (reads.line, reads.count, reads.device, reads.ops) == (
        4,
        10,
        simulated_device,
        (".item()",),
    )
    assert reads.syncs
    assert report.first_divergence is None and not report.transfers
    assert any("line 4 reads values from" in h and "10 times" in h for h in report.hints())


def test_a_loop_calling_item_10_times_on_cpu() -> None:
    report = trace(ITEM_LOOP, {"torch": torch, "DEV": "cpu"})
    [reads] = report.host_reads
    assert (reads.line, reads.count, reads.device) == (4, 10, "cpu")
    assert not reads.syncs and not report.hints()  # the cpu never waits


TRAINING_STEP = cell(
    """
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model = model.to(DEV)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    data = torch.randn(32, 6)
    target = data.sum(1, keepdim=True)
    losses = []
    for step in range(3):
        batch, want = data.to(DEV), target.to(DEV)
        loss = torch.nn.functional.mse_loss(model(batch), want)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    picked = data[data[:, 0] > 0].tolist()
    weights = [p.detach().cpu() for p in model.parameters()]
    """
)


def run_plain(source: str, namespace: dict) -> dict:
    exec(compile(source, "<plain>", "exec"), namespace)
    return namespace


def assert_same_values(plain: dict, traced: dict) -> None:
    assert plain["losses"] == traced["losses"]
    assert plain["picked"] == traced["picked"]
    for a, b in zip(plain["weights"], traced["weights"], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(
        plain["optimizer"].state.values(), traced["optimizer"].state.values(), strict=True
    ):
        assert torch.equal(a["exp_avg"].cpu(), b["exp_avg"].cpu())


@pytest.mark.simulated
def test_values_are_identical_with_and_without_tracing(simulated_device: str) -> None:
    plain = run_plain(TRAINING_STEP, {"torch": torch, "DEV": simulated_device})
    traced = {"torch": torch, "DEV": simulated_device}
    report = trace(TRAINING_STEP, traced)
    assert report.error is None
    assert_same_values(plain, traced)
    # and the report saw the loop: two inputs copied each step, one .item() per step
    [loop] = [t for t in report.transfers if t.line == 9]
    assert (loop.names, loop.count, loop.bytes) == (("data", "target"), 6, 3 * (32 * 6 + 32) * 4)
    assert loop.in_loop and loop.repeated
    assert loop.hint() == (
        f"line 9 copies data, target from cpu to {simulated_device} 6 times, 2.6 KiB: "
        "move the dataset once, or use pin_memory + non_blocking"
    )
    reads = {r.line: (r.count, r.ops) for r in report.host_reads}
    assert reads[14] == (3, (".item()",))
    assert reads[15][0] >= 2 and {"boolean mask", ".tolist()"} <= set(reads[15][1])


def test_values_are_identical_with_and_without_tracing_on_cpu() -> None:
    plain = run_plain(TRAINING_STEP, {"torch": torch, "DEV": "cpu"})
    traced = {"torch": torch, "DEV": "cpu"}
    report = trace(TRAINING_STEP, traced)
    assert report.error is None and not report.transfers and report.first_divergence is None
    assert_same_values(plain, traced)


@pytest.mark.simulated
def test_backward_on_the_device_thread_is_attributed_to_the_backward_line(
    simulated_device: str,
) -> None:
    # like CUDA, the simulated device runs backward on autograd's own thread: no line of the
    # user's is on its stack, but the thread that called backward() waits on that line
    source = cell(
        """
        w = torch.randn(3, requires_grad=True)
        x = w.to(DEV)
        loss = (x * 2).sum()
        loss.backward()
        """
    )
    namespace = {"torch": torch, "DEV": simulated_device}
    report = trace(source, namespace)
    assert report.error is None and torch.equal(namespace["w"].grad, torch.full((3,), 2.0))
    copies = {(t.line, t.source, t.target, t.bytes) for t in report.transfers}
    assert copies == {(2, "cpu", simulated_device, 12), (4, simulated_device, "cpu", 12)}
    assert report.unattributed == 0


# -- modes always come off ----------------------------------------------------------------------


def test_the_modes_are_removed_after_a_failing_cell() -> None:
    report = trace("x = torch.ones(2)\ny = x.to('meta') + x\n", {"torch": torch})
    assert isinstance(report.error, RuntimeError)
    assert report.first_divergence.line == 2 and report.first_divergence.names == (None, "x")
    assert no_modes_left()
    # and an ordinary error is an error too
    report = trace("x = torch.ones(2)\nraise ValueError('boom')\n", {"torch": torch})
    assert isinstance(report.error, ValueError) and report.first_divergence is None
    assert no_modes_left()


def test_the_modes_are_removed_when_the_cell_is_interrupted() -> None:
    namespace = {"torch": torch}
    with pytest.raises(KeyboardInterrupt):
        trace("x = torch.ones(2) * 2\nraise KeyboardInterrupt\n", namespace)
    assert no_modes_left()
    assert torch.equal(namespace["x"], torch.full((2,), 2.0))
    tracer = Tracer(namespace)
    with pytest.raises(KeyboardInterrupt), tracer:
        torch.ones(2).to("meta")
        raise KeyboardInterrupt
    assert no_modes_left() and isinstance(tracer.error, KeyboardInterrupt)
    [copy] = tracer.report().transfers  # recorded up to the interrupt, in this function
    assert (copy.source, copy.target, copy.bytes) == ("cpu", "meta", 8)
    assert copy.function == "test_the_modes_are_removed_when_the_cell_is_interrupted"


def test_a_syntax_error_runs_nothing() -> None:
    with pytest.raises(SyntaxError):
        trace("x = (", {"torch": torch})
    assert no_modes_left()


# -- what counts ---------------------------------------------------------------------------------


def test_meta_mixes_that_return_garbage_are_still_divergences() -> None:
    # on torch 2.13 a matmul with one meta input raises nothing; the trace still sees the mix
    namespace = {"torch": torch}
    report = trace(
        "x = torch.randn(4, 3)\nw = torch.randn(3, 2, device='meta')\ny = x @ w\n", namespace
    )
    assert report.error is None
    d = report.first_divergence
    assert (d.line, d.op, d.names, d.raised) == (3, "mm", ("x", "w"), False)
    assert "mm mixed x (4×3) on cpu, w (3×2) on meta" in report.text()


@pytest.mark.simulated
def test_cpu_scalars_beside_device_tensors_are_not_divergences(simulated_device: str) -> None:
    source = "x = torch.ones(3, device=DEV)\ny = x * torch.tensor(2.0)\nz = x.sum() + 1\n"
    report = trace(source, {"torch": torch, "DEV": simulated_device})
    assert report.error is None and report.first_divergence is None


def test_host_reads_dispatch_cannot_see_are_named() -> None:
    source = cell(
        """
        x = torch.tensor([1.0, -2.0, 3.0])
        a = x.tolist()
        b = x.numpy()
        text = repr(x)
        f = float(x[0])
        ok = bool(x[1] > 0)
        nz = x.nonzero()
        label = f"{x[2]:.1f}"
        """
    )
    report = trace(source, {"torch": torch})
    ops = {r.line: r.ops for r in report.host_reads}
    assert ops == {
        2: (".tolist()",),
        3: (".numpy()",),
        4: ("print/repr",),
        5: ("float()",),
        6: ("bool()",),
        7: ("nonzero",),
        8: ("format",),
    }
    assert all(r.count == 1 for r in report.host_reads)  # printing's own ops are not counted


def test_names_are_found_by_identity_not_by_value() -> None:
    source = cell(
        """
        x = torch.ones(2)
        twin = torch.ones(2)
        y = twin.to('meta')
        z = (x + 0).to('meta')
        _h = torch.ones(2)
        w = _h.to('meta')
        """
    )
    report = trace(source, {"torch": torch})
    names = {t.line: t.names for t in report.transfers}
    # equal values are not the same tensor; a temporary has no name; a _private name is used
    # when nothing else holds the tensor
    assert names == {3: ("twin",), 4: (), 6: ("_h",)}


def test_the_report_renders_as_text_and_escaped_html() -> None:
    source = "x = torch.ones(2)\nw = torch.ones(2, device='meta')\ny = x @ w if 1 < 2 else '<b>'\n"
    report = trace(source, {"torch": torch})
    html = report._repr_html_()
    assert "if 1 &lt; 2 else &#x27;&lt;b&gt;&#x27;" in html and "<b>'" not in html
    assert "First divergence" in html
    assert isinstance(report, TraceReport) and str(report) == report.text()
    data = report.to_dict()
    assert data["first_divergence"]["line"] == 3 and "meta" in data["error"]


def test_a_tracer_around_code_attributes_ops_to_the_functions_it_calls() -> None:
    tracer = Tracer({"torch": torch})
    with tracer:
        helper_that_moves()
    [copy] = tracer.report().transfers
    assert copy.function == "helper_that_moves" and copy.names == ("t",)
    assert copy.line == helper_that_moves.__code__.co_firstlineno + 2


def helper_that_moves() -> None:
    t = torch.ones(1)
    t.to("meta")


def test_importing_the_module_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, torchdevice_magic as tdm, torchdevice_magic.trace; "
        "print('torch' in sys.modules, callable(tdm.trace))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # no torch imported, and the package's trace is still the function after the submodule
    assert out.stdout.strip() == "False True"


def test_the_package_functions_are_the_recorder() -> None:
    import torchdevice_magic as tdm

    report = tdm.trace("y = torch.ones(2).to('meta')\n", {"torch": torch})
    assert isinstance(report, tdm.TraceReport) and report.transfers[0].target == "meta"
    assert tdm.Tracer is Tracer


# -- %%devicecheck --trace (an in-process shell, and a real kernel) ----------------------------


def run_in(shell, source: str):
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        result = shell.run_cell(source)
    shown = "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    return result, captured.stdout + captured.stderr, shown


def test_devicecheck_trace_shows_the_first_divergence_then_the_diagnosis(ip) -> None:
    run_in(ip, "import torch\nx = torch.randn(4, 3)\nw = torch.randn(3, 2)")
    result, printed, shown = run_in(
        ip,
        "%%devicecheck --trace\nh = x * 2\nfor i in range(3):\n    m = h.to('meta')\n"
        "s = w.sum().item()\ny = m + h\n",
    )
    assert not result.success
    trace_at = shown.index("First divergence: line 5: add.Tensor failed mixing m (4×3) on meta")
    assert "h (4×3) on cpu" in shown and "    y = m + h" in shown
    assert "line 3     cpu -> meta h: 3 copies, 144 B" in shown
    assert "line 4     1 on cpu (.item())" in shown
    assert "Hint: line 3 copies h from cpu to meta 3 times, 144 B" in shown
    diagnosis_at = shown.index("Device mismatch")
    assert trace_at < diagnosis_at and shown.count("Device mismatch") == 1
    # the traceback is the cell's: the recorder's own frames are hidden from it
    assert "Cell In[" in printed and "torchdevice_magic/trace/" not in printed
    assert no_modes_left()
    # the post-execute hook's scan ran inside the traced run_cell: none of its work is the
    # cell's (only lines of the cell appear)
    assert "line 6" not in shown.split("First divergence")[1].split("Device mismatch")[0]


def test_devicecheck_trace_names_functions_of_earlier_cells_as_ipython_does(ip) -> None:
    run_in(ip, "import torch\nx = torch.randn(4, 3)")
    defined, _, _ = run_in(ip, "def step(t):\n    moved = t.to('meta')\n    return moved + t")
    number = defined.execution_count
    _, _, shown = run_in(
        ip,
        "%%devicecheck --trace\ndef local(t):\n    return t.to('meta')\nz = local(x)\ny = step(x)",
    )
    assert f"step() In[{number}] line 3: add.Tensor failed mixing moved (4×3) on meta" in shown
    assert "local() line 2 cpu -> meta t: 1 copy" in shown  # this cell's own function: no In[]
    assert f"step() In[{number}] line 2 cpu -> meta t: 1 copy" in shown


def test_devicecheck_trace_composes_with_the_other_options(ip) -> None:
    run_in(ip, "import torch\nx = torch.randn(4, 3)\nmodel = torch.nn.Linear(3, 2)")
    # --to moves like the buttons: meta only where the config allows it (issue 12)
    ip.run_line_magic("config", "TorchDeviceMagic.allow_meta_target = True")
    result, printed, shown = run_in(
        ip, "%%devicecheck --trace --to meta -d meta --quiet\ny = model(x)"
    )
    assert result.success, result.error_in_exec
    assert "Moved" in printed  # --to moved first (not traced: it happened before the cell)
    assert "Trace: " in shown and "No op mixed devices." in shown and "Transfers" not in shown
    assert ip.user_ns["y"].device.type == "meta"
    result, printed, shown = run_in(
        ip, "%%devicecheck --trace --strict\nz = x.cpu() if False else x"
    )
    assert result.success and "Trace: 0 ops" in shown
    help_text = ip.magics_manager.magics["cell"]["devicecheck"].__doc__
    assert "--trace" in help_text and no_modes_left()


def test_devicecheck_trace_without_torch_says_so(ip) -> None:
    import sys

    saved = sys.modules.pop("torch")
    try:
        result, printed, _ = run_in(ip, "%%devicecheck --trace\nran = 1")
    finally:
        sys.modules["torch"] = saved
    assert result.success and ip.user_ns["ran"] == 1
    assert "torch is not imported yet, nothing to trace" in printed


@pytest.mark.kernel
def test_a_real_kernel_prints_the_first_divergence_then_the_diagnosis() -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(source)
        for source in (
            "%load_ext torchdevice_magic",
            "import torch\nfrom torchdevice_magic.testing import simulated_accelerator\n"
            "dev = simulated_accelerator()\n"
            "w = torch.randn(3, 2).to(dev)\nx = torch.randn(4, 3)",
            "%%devicecheck --trace\nh = x * 2\nfor i in range(2):\n    s = h.sum().item()\n"
            "y = h @ w",
        )
    ]
    NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True).execute()
    outputs = nb.cells[2].outputs
    kinds = [o.output_type for o in outputs]
    texts = [o.get("data", {}).get("text/plain", "") for o in outputs]
    html = [o.get("data", {}).get("text/html", "") for o in outputs]
    trace_at = next(i for i, t in enumerate(texts) if t.startswith("Trace: "))
    diagnosis_at = next(i for i, t in enumerate(texts) if t.startswith("Device mismatch"))
    # the trace report, the diagnosis, then the (short) traceback, as for any explained error
    assert trace_at < diagnosis_at < kinds.index("error")
    report = texts[trace_at]
    assert (
        "First divergence: line 4: mm failed mixing h (4×3) on cpu, w (3×2) on simdev:0" in report
    )
    assert "    y = h @ w" in report
    assert "line 3     2 on cpu (.item())" in report
    assert report.startswith("Trace: 6 ops on cpu, simdev:0;")  # the failing op counts too
    assert "First divergence" in html[trace_at]
    # (the diagnosis's own wording is diagnose's; the trace only has to come first)
    assert (
        "is on simdev:0" in texts[diagnosis_at]
        and "h (Tensor, 48 B) is on cpu" in texts[diagnosis_at]
    )


class _Hostile:
    """An object that raises on everything a careless inspector might touch."""

    @property
    def __class__(self):  # type: ignore[override]
        raise RuntimeError("do not read my class")

    def __eq__(self, other):
        raise RuntimeError("do not compare me")

    __hash__ = object.__hash__


class _HostileModule(torch.nn.Module):
    def named_modules(self, *args, **kwargs):
        raise RuntimeError("do not walk me")

    def forward(self, x):
        return x * 2


def test_hostile_objects_in_the_namespace_do_not_break_tracing() -> None:
    namespace = {"torch": torch, "weird": _Hostile(), "hostile": _HostileModule()}
    source = (
        "torch.manual_seed(0)\n"
        "y = hostile(torch.nn.Linear(2, 2)(torch.ones(2)))\n"
        "z = y.to('meta')\n"
    )
    report = trace(source, namespace)
    assert report.error is None and report.internal_errors == 0
    torch.manual_seed(0)
    assert torch.equal(namespace["y"], torch.nn.Linear(2, 2)(torch.ones(2)) * 2)
    # the Linear no name reaches keeps its type's name; the moved tensor is still named
    assert set(report.modules) == {"Linear", "hostile"}
    assert report.transfers[0].names == ("y",)
    assert no_modes_left()


def test_a_compiled_function_runs_under_the_trace_with_the_same_values() -> None:
    # dynamo leaves frames alone while a dispatch mode is active (it runs them eagerly), and
    # the recorder's own code is marked so that torch.compile never traces into it
    source = cell(
        """
        @torch.compile(backend="eager")
        def f(a, b):
            return (a * b).sin() + 1
        x = torch.randn(8)
        y = torch.randn(8)
        r = f(x, y)
        moved = r.to('meta')
        """
    )
    namespace = {"torch": torch}
    report = trace(source, namespace)
    assert report.error is None, report.error
    x, y = namespace["x"], namespace["y"]
    assert torch.equal(namespace["r"], (x * y).sin() + 1)
    assert [(t.line, t.names) for t in report.transfers] == [(7, ("r",))]
    assert no_modes_left()
