"""``%%devicecheck`` and ``%devices`` in an in-process shell: what a checked cell read and
created, --strict, --to, a device error explained with the chosen device, real help, bad input
as one line, composing with %%time, the table and its frame, hidden rows."""

from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError
from shellcells import SETUP, run

from torchdevice_magic.shell import get_session
from torchdevice_magic.shell.magics import MixedDevicesError


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


@pytest.mark.simulated
def test_strict_passes_the_training_loop_whose_loader_stays_on_the_host(ip, simulated_device):
    """A DataLoader's data and the batches a loop over it takes are on the cpu by design; the
    loop body moves them. That is not a mix: --strict lets it pass. A cpu tensor the cell
    makes beside the accelerator's results still fails it."""
    run(
        ip,
        f"import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        f"dev = {simulated_device!r}\n"
        "model = torch.nn.Linear(8, 2).to(dev)\n"
        "loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randn(32, 2)), batch_size=8)",
    )
    loop = (
        "for step, (x, y) in enumerate(loader):\n"
        "    loss = ((model(x.to(dev)) - y.to(dev)) ** 2).mean()\n"
    )
    result, printed, _ = run(ip, "%%devicecheck --strict --quiet\n" + loop)
    assert result.success, result.error_in_exec
    assert "spans" not in printed
    result, _, _ = run(ip, "%%devicecheck --strict --quiet\n" + loop + "kept = torch.ones(3)\n")
    assert isinstance(result.error_in_exec, MixedDevicesError)
    assert "spans 2 devices: cpu, " in str(result.error_in_exec)


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
    get_session(ip).config.allow_meta_target = True
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
        ("-d cuda:99", "-d cuda:99:"),  # an index no machine has (an 8-GPU one has cuda:7)
        ("--to cuda", "--to cuda: cuda is not available in this kernel"),
        ("-d cuda:0:1", "-d cuda:0:1:"),
    ],
)
def test_devicecheck_bad_input_is_one_line_and_changes_nothing(ip, line, message):
    if torch.cuda.is_available() and "cuda" in line and "99" not in line:
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


def test_devices_shows_the_table_and_returns_a_frame(ip):
    run(ip, "import torch\nbig = torch.ones(1000)\nsmall = torch.ones(3)")
    _, _, shown = run(ip, "%devices")
    assert "— cpu: 3.9 KiB" in shown and "big" in shown
    frame = ip.run_line_magic("devices", "-o")
    assert set(frame["name"]) >= {"big", "small"}
    assert int(frame.loc[frame["name"] == "big", "bytes"].iloc[0]) == 4000


def test_devices_o_device_column_holds_device_names_only(ip):
    """``%devices -o`` is for filtering: ``frame[frame.device == "cpu"]`` selects what holds
    data on the CPU. An optimizer without state has no device there (it holds no data); where
    its parameters are is ``param_devices`` and the table's words go to ``note``, while the
    text table still shows ``cpu (params; no state yet)``."""
    run(
        ip,
        "import torch\nnet = torch.nn.Linear(2, 2)\nadam = torch.optim.Adam(net.parameters())\n"
        "sgd = torch.optim.SGD(net.parameters(), lr=0.1)\nrelu = torch.nn.ReLU()\n"
        "x = torch.ones(3)",
    )
    frame = ip.run_line_magic("devices", "-o")
    rows = frame.set_index("name")
    assert sorted(frame[frame.device == "cpu"]["name"]) == ["net", "x"]
    assert set(frame["device"]) == {"cpu", ""}
    assert rows.loc["adam", "param_devices"] == "cpu" and rows.loc["adam", "device"] == ""
    assert rows.loc["adam", "note"].startswith("no state yet")
    assert rows.loc["sgd", "note"] == "keeps no state (SGD without momentum)"
    assert rows.loc["relu", "device"] == "" and rows.loc["relu", "param_devices"] == ""
    _, _, shown = run(ip, "%devices --text")
    assert "cpu (params; no state yet)" in shown and "cpu (params; no state)" in shown


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
