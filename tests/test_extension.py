"""The IPython layer in an in-process shell: loading, the hook, the magics, config."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from torchdevice_magic.protocol import COMM_TARGET
from torchdevice_magic.shell import session as session_module
from torchdevice_magic.shell.magics import MixedDevicesError

SETUP = """
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(3, 2).to("meta")
x = torch.randn(4, 3)
loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 2)), batch_size=4)
def train(model, loader):
    for batch_X, batch_y in loader:
        out = model(batch_X)
    return out
"""


def run(shell, cell):
    with capture_output() as captured:
        result = shell.run_cell(cell)
    texts = [o.data.get("text/plain", "") for o in captured.outputs]
    return result, captured.stdout + captured.stderr, "\n".join(texts)


def our_callbacks(shell):
    return [
        cb
        for cb in shell.events.callbacks["post_run_cell"]
        if getattr(cb, "__self__", None).__class__.__name__ == "DeviceSession"
    ]


def comm_target_registered():
    from comm import get_comm_manager

    return COMM_TARGET in get_comm_manager().targets


# -- loading ------------------------------------------------------------------------------------


def test_load_unload_reload_leave_exactly_the_expected_hooks(ip):
    magics = ip.magics_manager.magics
    assert len(our_callbacks(ip)) == 1
    assert "devices" in magics["line"] and "devicecheck" in magics["cell"]
    assert comm_target_registered()
    assert sum(type(c).__name__ == "TorchDeviceMagic" for c in ip.configurables) == 1

    ip.run_line_magic("load_ext", "torchdevice_magic")  # twice: nothing registered twice
    assert len(our_callbacks(ip)) == 1
    assert sum(type(c).__name__ == "TorchDeviceMagic" for c in ip.configurables) == 1

    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert our_callbacks(ip) == []
    assert "devices" not in magics["line"] and "devicecheck" not in magics["cell"]
    assert not comm_target_registered()
    assert not any(type(c).__name__ == "TorchDeviceMagic" for c in ip.configurables)
    assert session_module.get_session(ip) is None

    ip.run_line_magic("load_ext", "torchdevice_magic")
    assert len(our_callbacks(ip)) == 1 and "devices" in magics["line"]
    assert comm_target_registered()


def test_listed_in_interactive_shell_app_extensions():
    code = textwrap.dedent(
        """
        ip = get_ipython()
        import torch
        x = torch.ones(3)
        print("MAGIC", "devices" in ip.magics_manager.magics["line"])
        ip.run_line_magic("devices", "--text")
        """
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "IPython",
            "--no-banner",
            "--colors=NoColor",
            "--HistoryManager.enabled=False",
            "--InteractiveShellApp.extensions=['torchdevice_magic']",
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "MAGIC True" in result.stdout, result.stderr
    assert "x" in result.stdout and "12 B" in result.stdout


# -- automatic diagnosis: the seeds' scenarios, meta standing in for cuda -----------------------


#: meta stands in for cuda only where the user says so (as the notebooks do); by default nothing
#: real is moved to meta (the fix materialises the model instead, see tests/diagnose/test_fix_statements.py)
STAND_IN = "%config TorchDeviceMagic.allow_meta_target = True"


@pytest.fixture
def stand_in(ip):
    """Run a test with meta as the stand-in accelerator; the shell's config is shared by later
    tests, so it is switched off again afterwards."""
    yield lambda: run(ip, STAND_IN)
    run(ip, "%config TorchDeviceMagic.allow_meta_target = False")


def test_model_on_one_device_input_on_the_other(ip, stand_in):
    run(ip, SETUP)
    _, _, shown = run(ip, "y = model(x)")
    assert 'Fix: model.to_empty(device="cpu")' in shown
    stand_in()
    result, _, shown = run(ip, "y = model(x)")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "model (Linear, 32 B) is on meta" in shown
    assert "x (Tensor, 48 B) is on cpu" in shown
    assert 'Fix: x = x.to("meta")' in shown


def test_dataloader_loop_whose_batch_stays_behind(ip, stand_in):
    run(ip, SETUP)
    stand_in()
    _, _, shown = run(ip, "for batch_X, batch_y in loader:\n    out = model(batch_X)")
    assert "model (Linear, 32 B) is on meta" in shown
    assert "batch_X (Tensor, 48 B) is on cpu" in shown
    assert 'batch_X = batch_X.to("meta")' in shown


def test_error_inside_a_function_names_its_locals(ip, stand_in):
    run(ip, SETUP)
    stand_in()
    _, _, shown = run(ip, "train(model, loader)")
    assert "batch_X (Tensor, 48 B, in train()) is on cpu" in shown
    assert "model (Linear, 32 B) is on meta" in shown
    assert "Fix (inside train())" in shown


def test_unrelated_errors_get_no_diagnosis(ip):
    run(ip, SETUP)
    result, _, shown = run(ip, "torch.ones(2) + torch.ones(3)")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "Device mismatch" not in shown


def test_auto_diagnosis_can_be_turned_off_with_config(ip):
    run(ip, SETUP)
    run(ip, "%config TorchDeviceMagic.auto_diagnose = False")
    _, _, shown = run(ip, "y = model(x)")
    assert "Device mismatch" not in shown
    run(ip, "%config TorchDeviceMagic.auto_diagnose = True")
    _, _, shown = run(ip, "y = model(x)")
    assert "Device mismatch" in shown


# -- the hook ---------------------------------------------------------------------------------


def test_hook_warns_once_per_object_and_state(ip):
    run(ip, "import torch\nnet = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))")
    _, printed, _ = run(ip, "net[1].to('meta')")
    assert printed.count("net (Sequential) spans cpu, meta") == 1
    _, printed, _ = run(ip, "z = 1")
    assert "spans" not in printed
    _, printed, _ = run(ip, "net[0].to('meta'); net[1].to('cpu')")
    assert printed.count("net (Sequential) spans cpu, meta") == 0  # same devices: same state


def test_hook_warns_when_optimizer_state_is_left_behind(ip):
    run(
        ip,
        "import torch\nm = torch.nn.Linear(2, 2)\nopt = torch.optim.Adam(m.parameters())\n"
        "m(torch.ones(1, 2)).sum().backward(); opt.step()",
    )
    # a checkpoint loaded with map_location elsewhere: state on one device, parameters on another
    _, printed, _ = run(
        ip, "for s in opt.state.values():\n    s['exp_avg'] = s['exp_avg'].to('meta')"
    )
    assert "opt: state on cpu, meta but parameters on cpu" in printed


def test_hook_never_raises_into_the_session(ip, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("scan exploded")

    monkeypatch.setattr(session_module.Scanner, "scan", broken)
    run(ip, "import torch")
    for _ in range(3):
        result, _, _ = run(ip, "a = torch.ones(2)")
        assert result.success
    failures = [r for r in caplog.records if "hook failed" in r.getMessage()]
    assert len(failures) == 1  # logged once, then it carries on


def test_hook_does_nothing_until_torch_is_imported():
    code = textwrap.dedent(
        """
        import sys
        ip = get_ipython()
        ip.run_line_magic("load_ext", "torchdevice_magic")
        ip.run_cell("a = [1, 2, 3]")
        ip.run_cell("b = {'x': 1}")
        ip.run_line_magic("devices", "--text")
        print("TORCH", "torch" in sys.modules)
        """
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "IPython",
            "--no-banner",
            "--HistoryManager.enabled=False",
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "TORCH False" in result.stdout, result.stderr
    assert "torch is not imported" in result.stdout


def test_hook_rescans_incrementally_and_sees_reused_names(ip):
    run(ip, "import torch\nw = torch.ones(3)")
    session = session_module.get_session(ip)
    assert session.inventory["w"].shape == (3,)
    run(ip, "del w\nw = torch.ones(5)")
    assert session.inventory["w"].shape == (5,)


# -- %%devicecheck --------------------------------------------------------------------------------


def test_devicecheck_reports_what_the_cell_read_and_created(ip):
    run(ip, "import torch\na = torch.ones(4)\nunrelated = torch.ones(100)")
    result, _, shown = run(ip, "%%devicecheck\nb = a * 2")
    assert result.success
    assert "a " in shown and "b " in shown and "unrelated" not in shown
    _, _, shown = run(ip, "%%devicecheck --all\nc = a + 1")
    assert "unrelated" in shown


def test_devicecheck_warns_and_strict_fails_when_the_cell_spans_devices(ip):
    run(ip, "import torch\na = torch.ones(4)\nm = torch.ones(4, device='meta')")
    result, printed, _ = run(ip, "%%devicecheck --quiet\nc = a.sum(); d = m.sum()")
    assert result.success and "spans 2 devices: cpu, meta" in printed
    result, _, _ = run(ip, "%%devicecheck --strict --quiet\nran = True\ne = a.sum(); f = m.sum()")
    assert isinstance(result.error_in_exec, MixedDevicesError)
    assert ip.user_ns["ran"] is True  # the cell ran, then failed
    assert result.error_in_exec._render_traceback_() == [
        "MixedDevicesError: what this cell used spans 2 devices: cpu, meta"
    ]


def test_devicecheck_explains_a_device_error_with_the_chosen_device(ip):
    run(ip, SETUP)
    result, _, shown = run(ip, "%%devicecheck -d cpu\ny = model(x)")
    assert not result.success
    assert shown.count("Device mismatch") == 1  # the magic's, not also the hook's
    assert "model.to_empty(" in shown or 'model.to("cpu")' in shown


def test_devicecheck_to_meta_is_refused_like_the_buttons_unless_allowed(ip):
    run(ip, SETUP)
    result, _, _ = run(ip, "%%devicecheck --to meta --quiet\ny = model(x)")
    assert isinstance(result.error_in_exec, UsageError)
    assert "moving to meta is turned off" in str(result.error_in_exec)
    assert ip.user_ns["x"].device.type == "cpu" and "y" not in ip.user_ns


def test_devicecheck_help_shows_the_cell_magic_usage(ip):
    doc = ip.find_cell_magic("devicecheck").__doc__
    assert "%%devicecheck [-d DEVICE]" in doc


def test_devicecheck_to_moves_what_the_cell_reads_before_running_it(ip):
    run(ip, SETUP)
    session_module.get_session(ip).config.allow_meta_target = True
    result, printed, _ = run(ip, "%%devicecheck --to meta --quiet\ny = model(x)")
    assert result.success, result.error_in_exec
    assert ip.user_ns["x"].device.type == "meta"
    assert ip.user_ns["y"].device.type == "meta"
    assert "Moved" in printed


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--bogus", "unrecognized arguments: --bogus"),
        ("-d cdua", "-d cdua:"),
        ("-d cuda:7", "-d cuda:7:"),
        ("--to cuda", "--to cuda: cuda is not available in this kernel"),
        ("-d cuda:0:1", "-d cuda:0:1:"),
    ],
)
def test_devicecheck_bad_input_is_one_line_and_changes_nothing(ip, line, message):
    if torch.cuda.is_available() and "cuda" in line and "7" not in line:
        pytest.skip("this machine has CUDA")
    run(ip, "import torch\nx = torch.ones(2)")
    result, _, _ = run(ip, f"%%devicecheck {line}\nran = True\nx = x.to('meta')")
    assert isinstance(result.error_in_exec, UsageError)
    assert message in str(result.error_in_exec)
    assert "\n" not in str(result.error_in_exec)
    assert "ran" not in ip.user_ns and ip.user_ns["x"].device.type == "cpu"


def test_devicecheck_has_real_help(ip):
    doc = ip.magics_manager.magics["cell"]["devicecheck"].__doc__
    for option in ("-d DEVICE", "--to DEVICE", "--strict", "--quiet", "--all"):
        assert option in doc


# -- %devices --------------------------------------------------------------------------------------


def test_devices_shows_the_table_and_returns_a_frame(ip):
    run(ip, "import torch\nbig = torch.ones(1000)\nsmall = torch.ones(3)")
    _, _, shown = run(ip, "%devices")
    assert "— cpu: 3.9 KiB" in shown and "big" in shown
    frame = ip.run_line_magic("devices", "-o")
    assert set(frame["name"]) >= {"big", "small"}
    assert int(frame.loc[frame["name"] == "big", "bytes"].iloc[0]) == 4000


def test_devices_hidden_shows_output_history(ip):
    run(ip, "import torch")
    ip.run_cell("torch.ones(256)", store_history=True)
    _, _, shown = run(ip, "%devices --hidden")
    assert "held by output history" in shown and "1.0 KiB" in shown
    _, _, shown = run(ip, "%devices")
    assert "held by output history" not in shown


def test_devices_bad_option_is_a_usage_error(ip):
    result, _, _ = run(ip, "%devices --nope")
    assert isinstance(result.error_in_exec, UsageError)


def test_devicecheck_composes_with_time_both_ways(ip):
    run(ip, "import torch\nx = torch.ones(3)")
    result, printed, _ = run(ip, "%%devicecheck --quiet\n%%time\ny = x * 2")
    assert result.success and "Wall time" in printed
    assert ip.user_ns["y"].tolist() == [2.0, 2.0, 2.0]
    result, printed, _ = run(ip, "%%time\n%%devicecheck --quiet\nz = x * 3")
    assert result.success and "Wall time" in printed
    assert ip.user_ns["z"].tolist() == [3.0, 3.0, 3.0]


def test_devicecheck_output_and_display_reach_the_cell(ip):
    run(ip, "import torch\nx = torch.ones(3)")
    result, printed, shown = run(
        ip,
        "%%devicecheck --quiet\nprint('hello from the cell')\nfrom IPython.display import display\ndisplay('shown')",
    )
    assert result.success and "hello from the cell" in printed and "'shown'" in shown


def test_hook_warns_once_when_the_model_is_recreated_but_not_its_optimizer(ip):
    run(
        ip, "import torch\nmodel = torch.nn.Linear(3, 2)\nopt = torch.optim.SGD(model.parameters())"
    )
    _, printed, _ = run(ip, "model = torch.nn.Linear(3, 2)")
    assert "opt updates all 2 parameters that no variable here holds" in printed
    _, printed, _ = run(ip, "x = torch.ones(2)")
    assert "opt updates" not in printed  # once
    _, printed, _ = run(ip, "opt = torch.optim.SGD(model.parameters())")
    assert "opt updates" not in printed


def test_default_device_config_is_validated(ip, caplog):
    run(ip, "import torch")
    run(ip, "%config TorchDeviceMagic.default_device = 'cdua'")
    # %config reports a refused value as one logged line and keeps the old value
    assert any(
        "default_device 'cdua': 'cdua' is not a device" in r.getMessage() for r in caplog.records
    )
    session = session_module.get_session(ip)
    assert session.config.default_device == ""
    run(ip, "%config TorchDeviceMagic.default_device = 'cpu'")
    assert session.default_target() == "cpu"
    run(ip, "%config TorchDeviceMagic.default_device = ''")
