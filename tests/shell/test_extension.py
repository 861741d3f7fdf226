"""The extension in an in-process shell: loading and unloading, the automatic diagnosis, the
post-execute hook, config. The magics: tests/shell/test_magics.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from shellcells import SETUP, run

from torchdevice_magic import app as app_module
from torchdevice_magic.protocol import COMM_TARGET
from torchdevice_magic.shell import get_session


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
    assert get_session(ip) is None

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

    monkeypatch.setattr(app_module.Scanner, "scan", broken)
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
    session = get_session(ip)
    assert session.app.inventory["w"].shape == (3,)
    run(ip, "del w\nw = torch.ones(5)")
    assert session.app.inventory["w"].shape == (5,)


@pytest.mark.parametrize(
    ("cell", "shape"),
    [
        ("exec('t3 = torch.ones(7)')", (7,)),
        ("globals()['t3'] = torch.ones(7)", (7,)),
        ("rebind()", (7,)),  # a function's `global t3`
        ("%run -i {script}", (7,)),
        ("t5 = t3 = torch.ones(7)", (7,)),
        ("del t3", None),
    ],
)
def test_the_hook_sees_a_name_rebound_by_any_route(ip, tmp_path, cell, shape):
    """The rescan after a cell looks first at the names the cell mentions; a name rebound any
    other way (exec, globals(), a function's global statement, %run, del) is still seen."""
    script = tmp_path / "rebind.py"
    script.write_text("t3 = torch.ones(7)\n")
    run(ip, "import torch\n" + "\n".join(f"t{i} = torch.ones(2)" for i in range(3000)))
    run(ip, "def rebind():\n    global t3\n    t3 = torch.ones(7)")
    run(ip, "t9 = torch.ones(4)")  # an ordinary cell first: the rescan's quick path is set up
    session = get_session(ip)
    assert session.app.inventory["t3"].shape == (2,)
    result, out, _ = run(ip, cell.format(script=script))
    assert result.success, out
    records = session.app.inventory.records_of("t3")
    assert (records[0].shape if records else None) == shape
    assert session.app.inventory.records_of("t9")[0].shape == (4,)


def test_cells_stored_in_the_history_keep_the_rescans_quick_path(ip, monkeypatch):
    """A kernel stores every cell in IPython's history, which binds ``_i``, ``_ii``, ``_iii``
    (and, with a result, ``_``, ``__``, ``___``) to new objects after each one: the rescan
    expects those, so an ordinary cell is settled by one comparison of the namespace's ids,
    never by the name-by-name search that an ``exec`` rebinding needs."""
    from torchdevice_magic.scan import scanner

    searches: list[list[str]] = []
    search = scanner._rebound_anywhere

    def counted(names, ids, old_ids):
        found = search(names, ids, old_ids)
        searches.append(found)
        return found

    monkeypatch.setattr(scanner, "_rebound_anywhere", counted)
    code = "import torch\n" + "\n".join(f"t{i} = torch.ones(2)" for i in range(300))
    ip.run_cell(code, store_history=True)
    ip.run_cell("t9 = torch.ones(4)", store_history=True)
    ip.run_cell("t9.sum()", store_history=True)  # a result: _, __, ___ move as well
    searches.clear()
    for cell in ("t9 = torch.ones(5)", "t9.sum()", "t8 = t9 * 2"):
        assert ip.run_cell(cell, store_history=True).success
    assert searches == []
    assert get_session(ip).app.inventory["t8"].shape == (5,)
    ip.run_cell("exec('t3 = torch.ones(7)')", store_history=True)
    assert len(searches) == 1 and "t3" in searches[0]  # a rebinding the cell does not name
    assert get_session(ip).app.inventory["t3"].shape == (7,)


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
    session = get_session(ip)
    assert session.config.default_device == ""
    run(ip, "%config TorchDeviceMagic.default_device = 'cpu'")
    assert session.app.default_target() == "cpu"
    run(ip, "%config TorchDeviceMagic.default_device = ''")


def test_hook_names_a_plain_tensor_attribute_a_cell_sets_beside_the_parameters(ip):
    run(ip, "import torch\nnet = torch.nn.Linear(2, 2).to('meta')")
    _, printed, _ = run(ip, "net.mask = torch.ones(2)")
    assert printed.count("net (Linear) spans cpu, meta — net.mask on cpu is a plain tensor") == 1
    _, printed, _ = run(ip, "net.mask = net.mask.to('meta')")
    assert "spans" not in printed
    _, printed, _ = run(ip, "%devices --text")
    assert "spans" not in printed and "plain tensor" not in printed
