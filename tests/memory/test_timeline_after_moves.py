"""The memory timeline after a move from the sidebar, the table or the one-click fix: the
holders it tracks (the last error's frames above all) are measured again, so a model that a
failed cell's traceback reaches and that then moved is not still counted on its old device."""

import pytest
from memorykit import run, timeline_of

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
