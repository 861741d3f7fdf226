"""The memory timeline after a move from the sidebar, the table or the one-click fix: the
holders it tracks (the last error's frames above all) are measured again, so a model that a
failed cell's traceback reaches and that then moved is not still counted on its old device."""

import pytest
from memorykit import run, timeline_of

from torchdevice_magic.units import format_bytes

pytestmark = pytest.mark.simulated


def _held(shell, device):
    """What the timeline's last row for ``device`` says is held there (0: no row)."""
    rows = [r for r in timeline_of(shell).rows if r.device == device]
    return rows[-1].bytes if rows else 0


def test_a_move_after_a_failed_cell_leaves_nothing_on_the_old_device(ip, simulated_device):
    """The user's path: ``model(x)`` fails (the traceback keeps the model's frames), the fix
    moves model and optimizer, the next cell runs. The timeline must agree with the
    inventory: only Adam's 0-dim step counters stay on the cpu."""
    from torchdevice_magic.shell import get_session

    run(
        ip,
        "import torch\n"
        "model = torch.nn.Linear(64, 64)\n"
        "opt = torch.optim.Adam(model.parameters())\n"
        "model(torch.randn(4, 64)).sum().backward()\n"
        "opt.step()\n"
        f"x = torch.randn(8, 64, device={simulated_device!r})",
    )
    result, _, shown = run(ip, "y = model(x)")
    assert not result.success and "Device mismatch" in shown
    moved = get_session(ip).app.move(simulated_device, ["model", "opt"])
    assert moved.ok, moved.summary()
    assert run(ip, "y = model(x)")[0].success
    steps = 2 * 4  # Adam's float32 step counter per parameter stays on the cpu
    assert _held(ip, "cpu") == steps
    # and the undo brings it all back: the cpu holds model, gradients and state again
    undone = get_session(ip).app.undo()
    assert undone.ok, undone.summary()
    run(ip, "pass")
    params = (64 * 64 + 64) * 4
    assert _held(ip, "cpu") == params * 4 + steps  # weights, grads, exp_avg, exp_avg_sq


def test_a_move_and_its_undo_get_rows_of_their_own_at_once(ip, simulated_device):
    """A move from a button is on the chart when it is made, not with the next cell: rows of
    its own after the last cell, saying what moved where; the undo likewise; a cell then
    gets its usual rows."""
    from torchdevice_magic.shell import get_session
    from torchdevice_magic.viewmodel import held_label, point_tooltip

    run(ip, "import torch\nmodel = torch.nn.Linear(64, 64)\nx = torch.randn(8, 64)")
    timeline = timeline_of(ip)
    cell, seen = timeline.last_cell, len(timeline.rows)
    held = (64 * 64 + 64) * 4 + 8 * 64 * 4
    app = get_session(ip).app
    moved = app.move(simulated_device)
    assert moved.ok, moved.summary()
    rows = {row.device: row for row in timeline.rows[seen:]}
    assert set(rows) == {"cpu", moved.device}
    action = f"move to {moved.device}"
    assert all(row.cell == cell and row.action == action for row in rows.values())
    assert (rows["cpu"].bytes, rows["cpu"].delta) == (0, -held)
    assert (rows[moved.device].bytes, rows[moved.device].delta) == (held, held)
    label = held_label(rows[moved.device].to_dict())
    assert label.endswith(f"(+{format_bytes(held)} by the {action})"), label
    assert point_tooltip(rows["cpu"].to_dict()).startswith(f"the {action} after cell {cell}, cpu")
    seen = len(timeline.rows)
    assert app.undo().ok
    rows = {row.device: row for row in timeline.rows[seen:]}
    assert {row.action for row in rows.values()} == {"undo"}
    assert (rows["cpu"].bytes, rows[moved.device].bytes) == (held, 0)
    printed = run(ip, "%devices --timeline")[1]
    assert f"{cell}, then {action}" in printed and f"{cell}, then undo" in printed
    result = run(ip, "y = torch.ones(2)")[0]
    (last,) = [row for row in timeline.rows if row.cell == result.execution_count]
    assert last.action == "" and last.delta == 8


def test_a_move_that_moved_nothing_adds_no_row(ip, simulated_device):
    from torchdevice_magic.shell import get_session

    run(ip, "import torch\nx = torch.randn(8)")
    seen = len(timeline_of(ip).rows)
    app = get_session(ip).app
    assert app.move("cpu").ok  # already there
    assert len(timeline_of(ip).rows) == seen


def test_a_move_between_two_runs_of_a_leaking_cell_keeps_the_leak_warning(ip, simulated_device):
    """A move is no run of a cell: a list of losses that grew with one run of the training
    cell, then a move of something else, then a second run, is still growth over runs."""
    from torchdevice_magic.shell import get_session

    run(ip, "import torch\nmodel = torch.nn.Linear(64, 64)\nlosses = []\nx = torch.randn(8)")
    train = "for _ in range(4):\n    losses.append(model(torch.randn(32, 64)).pow(2).sum())"
    _, first, _ = run(ip, train)
    assert "more after every run" not in first
    assert get_session(ip).app.move(simulated_device, ["x"]).ok
    _, again, _ = run(ip, train)
    assert "losses keeps" in again and "more after every run" in again, again
