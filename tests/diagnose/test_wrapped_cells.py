"""Cells as users write them: a device error inside ``%%time``, ``%time``, ``%%timeit``,
``%timeit``, ``%%capture``, ``%prun``/``%%prun``, a cell with line magics and ``!`` lines among
its code, and a script run by ``%run`` (with and without ``-i``) is explained exactly as the
same code in a plain cell: the same culprits, the same fix, the same one-click move, in the
user's own line numbers and function names (never a wrapper's, such as timeit's ``inner``).
The fix, typed above the failing line (a rewritten line in its place), makes the cell pass.

In-process IPython shell with the extension loaded; cpu + the simulated accelerator.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from diagnosis_checks import run, setup
from IPython.utils.capture import capture_output

from torchdevice_magic.diagnose import user_code, wrapped_cell

SETUP = """
import torch
net = torch.nn.Linear(10, 2).to(DEV)
batch = torch.randn(4, 10)
on_device = torch.randn(4, 10, device=DEV)
def step(model, x):
    return model(x)
"""

#: (code, the line of the code that fails) -- the code as a plain cell would hold it
CODES = {
    "names": ("out = net(batch)", 1),
    "unnamed": ("scale = 2\nout = net(on_device) + torch.ones(4, 2) * scale", 2),
    "function": ("y = step(net, batch)", 1),
}

#: how each wrapper holds the code: (cell template, lines above the code, single line only)
WRAPPERS = {
    "%%time": ("%%time\n{code}", 1, False),
    "%time": ("%time {code}", 0, True),
    "%%timeit": ("%%timeit -n1 -r1\n{code}", 1, False),
    "%timeit": ("%timeit -n 1 -r1 {code}", 0, True),
    "%%capture": ("%%capture captured\n{code}", 1, False),
    "%prun": ("%prun -q {code}", 0, True),
    "%%prun": ("%%prun -q\n{code}", 1, False),
    "magics among the code": ("%config Completer.use_jedi = False\n!true\n{code}", 2, False),
}


@pytest.mark.parametrize(
    ("cell", "code"),
    [
        ("%%time\nout = f(x)", "pass\nout = f(x)"),
        ("%time out = f(x)", "out = f(x)"),
        ("%timeit -n 1 -r1 out = f(x)", "out = f(x)"),
        ("%timeit -n1 -q out = -x", "out = -x"),
        ("%%timeit -n1 prepare()\nout = f(x)", "prepare()\nout = f(x)"),
        ("%%prun -s cumulative -q\nout = f(x)", "pass\nout = f(x)"),
        ("%%capture --no-stderr captured\nout = f(x)", "pass\nout = f(x)"),
        ("x = 1\n%time y = x\n!ls\n%config A.b = 1", "x = 1\ny = x\n!ls\n%config A.b = 1"),
        ("for i in r:\n    %time g(i)", "for i in r:\n    g(i)"),
        ("%capture y = 1", "%capture y = 1"),  # %%capture only: no line form
    ],
)
def test_the_users_code_keeps_the_users_lines(cell: str, code: str) -> None:
    assert user_code(cell) == code


def test_a_nested_cell_belongs_to_the_capture_that_ran_it() -> None:
    outer = "%%capture captured\nout = net(batch)\n"
    assert wrapped_cell(outer, "out = net(batch)\n") is outer
    assert wrapped_cell("get_ipython().run_cell(code)", "out = 1") == "out = 1"
    assert wrapped_cell("%%time\nother()", "out = net(batch)") == "out = net(batch)"


def _shown(diagnoses: list[Any], shell: Any, cell: str) -> Any:
    """Run ``cell`` (it fails with a device error); the one diagnosis the user was shown."""
    diagnoses.clear()
    run(shell, cell)
    assert len(diagnoses) == 1, [d.text() for d in diagnoses]
    return diagnoses[0]


def _in_user_lines(diagnosis: Any, shift: int) -> tuple[Any, ...]:
    """What a diagnosis says, its ``line N`` places moved by ``shift`` lines."""

    def moved(where: str) -> str:
        return re.sub(r"^line (\d+)", lambda m: f"line {int(m.group(1)) + shift}", where)

    culprits = [(c.name, moved(c.where), c.devices, c.alias) for c in diagnosis.culprits]
    fixes = [(moved(f.where), f.source) for f in diagnosis.fix_lines]
    return (diagnosis.kind, culprits, fixes, diagnosis.target, diagnosis.safe, diagnosis.action)


def _with_fix(cell: str, diagnosis: Any, failing: int, before: list[str] | None = None) -> str:
    """The cell with the fix typed in: a rewritten line in its place, the other statements on
    the lines above the failing line (1-based ``failing``), or into ``before`` (a cell run
    first) where a list is given."""
    lines = cell.split("\n")
    above = [f.source for f in diagnosis.fix_lines if f.where in ("cell", "loop")]
    if before is not None:
        before.extend(above)
        above = []
    for fix in diagnosis.fix_lines:
        found = re.match(r"line (\d+)", fix.where)
        if found is not None:
            number = int(found.group(1))
            magic = re.match(r"\s*%\w+(?:\s+-\w+(?:\s+\d+)?)*\s+", lines[number - 1])
            lines[number - 1] = (magic.group(0) if magic else "") + fix.source
    return "\n".join(lines[: failing - 1] + above + lines[failing - 1 :])


@pytest.mark.simulated
@pytest.mark.parametrize("wrapper", list(WRAPPERS))
@pytest.mark.parametrize("case", list(CODES))
def test_a_wrapped_cell_is_explained_as_the_plain_cell(
    ip, diagnoses, simulated_device, wrapper: str, case: str
) -> None:
    template, above, single_line = WRAPPERS[wrapper]
    code, failing = CODES[case]
    if single_line and "\n" in code:
        pytest.skip("a line magic holds one line")
    setup(ip, SETUP, simulated_device)
    plain = _shown(diagnoses, ip, code)
    cell = template.format(code=code)
    wrapped = _shown(diagnoses, ip, cell)
    assert _in_user_lines(wrapped, 0) == _in_user_lines(plain, above), wrapped.text()
    assert "inner" not in wrapped.text()  # timeit's wrapper function is never named
    assert wrapped.culprits, wrapped.text()
    if case == "unnamed":
        assert f"(rewrite line {failing + above})" in wrapped.text()
    # timeit runs the code in a function: what rebinds a name goes in a cell before, and
    # the diagnosis says so
    before: list[str] | None = [] if "timeit" in wrapper else None
    assert ("in a cell before the timed one" in wrapped.note) == (before is not None)
    fixed = _with_fix(cell, wrapped, failing + above, before)
    with capture_output():
        first = ip.run_cell("\n".join(before or ["pass"]))
        result = ip.run_cell(fixed)
    assert first.success and result.success and not diagnoses[1:], fixed


@pytest.mark.simulated
def test_the_diagnosis_of_a_captured_cell_is_not_captured(ip, simulated_device) -> None:
    """``%%capture`` hides the cell's output, not its error: the traceback reaches the user
    (ipykernel sends it past the capture) and the diagnosis must too."""
    setup(ip, SETUP, simulated_device)
    with capture_output() as seen:
        ip.run_cell("%%capture captured\nout = net(batch)")
    texts = [output.data.get("text/plain", "") for output in seen.outputs]
    assert any(text.startswith("Device mismatch: batch (Tensor") for text in texts), texts
    captured = ip.user_ns["captured"]
    assert not any("Device mismatch" in o.data.get("text/plain", "") for o in captured.outputs)


def _places(diagnosis: Any, line: int, script_line: int | None = None) -> tuple[Any, ...]:
    """Culprits and fix lines, a ``line N`` place of the cell named as the script's line."""

    def place(where: str) -> str:
        if script_line is None:
            return where
        return where.replace(f"line {line}", f"line {script_line} of train.py")

    return (
        [(c.name, place(c.where), c.devices) for c in diagnosis.culprits],
        [(place(f.where), f.source) for f in diagnosis.fix_lines],
    )


@pytest.mark.simulated
@pytest.mark.parametrize("interactive", [False, True], ids=["%run", "%run -i"])
def test_a_script_run_by_run_is_explained_as_the_same_code_in_a_cell(
    ip, diagnoses, simulated_device, tmp_path: Path, interactive: bool
) -> None:
    """The script's own names and lines (``line 7 of train.py``), its module's namespace
    (without ``-i`` a fresh one); the fix typed into the script makes ``%run`` pass."""
    setup(ip, SETUP, simulated_device)
    body = "scale = 2\nout = net(on_device) + torch.ones(4, 2) * scale\nz = step(net, batch)"
    head = "" if interactive else f"DEV = {simulated_device!r}\n" + SETUP.lstrip()
    shift = head.count("\n")
    script = tmp_path / "train.py"
    script.write_text(head + body + "\n")
    cell = f"%run {'-i ' if interactive else ''}{script}"
    # the first error: a tensor no variable holds, made on line 2 of the code
    plain = _shown(diagnoses, ip, body)
    wrapped = _shown(diagnoses, ip, cell)
    assert f"(rewrite line {2 + shift} of train.py)" in wrapped.text(), wrapped.text()
    assert "the fix goes into train.py, above that line" in wrapped.note
    assert _places(wrapped, 2) == _places(plain, 2, 2 + shift)
    # typed in, the second error (on the last line) is explained as in the cell
    fixed_body = _with_fix(body, plain, 2)
    script.write_text(_with_fix(head + body, wrapped, 2 + shift) + "\n")
    assert script.read_text() == head + fixed_body + "\n"
    plain = _shown(diagnoses, ip, fixed_body)
    wrapped = _shown(diagnoses, ip, cell)
    assert _places(wrapped, 3) == _places(plain, 3), wrapped.text()
    assert wrapped.culprits and "step" not in [c.name for c in wrapped.culprits]
    script.write_text(_with_fix(head + fixed_body, wrapped, 3 + shift) + "\n")
    diagnoses.clear()
    with capture_output():
        ip.run_cell(cell)
    assert not diagnoses, diagnoses[0].text()
    assert "z" in ip.user_ns
