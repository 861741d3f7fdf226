"""Where CUDA was first initialised (``firstinit``): the cell and line noted without
initialising anything, and the fork / notebook_launcher errors explained with that cell. On
CPU the initialised state is a stand-in (``torch.cuda.is_initialized`` and the original
``_lazy_init`` replaced); the error texts are the real ones, raised by torch's own
``_lazy_init`` and rebuilt from accelerate's source. The CUDA-marked test is the real thing."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from torchdevice_magic.firstinit import FirstInit, fork_error_advice

HAS_CUDA = torch.cuda.is_available()
#: what torch.cuda._lazy_init raises without CUDA (torch/cuda/__init__.py): a build without
#: CUDA, or a CUDA build that finds no driver or no device
NO_CUDA_HERE = "not compiled with CUDA|Found no NVIDIA driver|No CUDA GPUs are available"


class StandIn:
    """A CUDA that initialises when torch calls its ``_lazy_init``: the state ``firstinit``
    reads (``is_initialized``) and the entry it wraps, in place of torch.cuda's own, in every
    module that holds it (``torch.cuda.memory`` and ``torch.cuda.random`` imported it by name,
    as torch's own import does)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.initialised = False
        self.calls = 0

        def lazy_init() -> None:
            self.calls += 1
            self.initialised = True

        #: one function object, held by every module as torch's own is
        self.lazy_init = lazy_init
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: self.initialised)
        self.holders = [torch.cuda, torch.cuda.memory, torch.cuda.random]
        assert all(m._lazy_init is torch.cuda._lazy_init for m in self.holders)
        for module in self.holders:
            monkeypatch.setattr(module, "_lazy_init", lazy_init)


def test_the_first_cell_and_line_are_noted_without_initialising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = StandIn(monkeypatch)
    watch = FirstInit()
    watch.start()
    assert not cuda.initialised and cuda.calls == 0  # starting to watch initialises nothing
    assert torch.cuda._lazy_init is not cuda.lazy_init  # the recorder is in place
    assert watch.after_cell(1) == [] and watch.lines() == []
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    torch.cuda._lazy_init()  # what torch calls when a cell first touches CUDA
    assert torch.cuda._lazy_init == cuda.lazy_init  # the original is back: no cost after
    (site,) = watch.after_cell(2)
    assert (site.device_type, site.cell, site.line) == ("cuda", 2, line)
    assert (
        site.source == "torch.cuda._lazy_init()  # what torch calls when a cell first touches CUDA"
    )
    assert watch.lines() == [f"CUDA was first initialised by cell [2], line {line}: {site.source}"]
    assert watch.after_cell(3) == []  # noted once


def test_a_device_initialised_outside_the_recorder_is_noted_by_its_cell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = StandIn(monkeypatch)
    watch = FirstInit()
    watch.start()
    cuda.initialised = True  # a path the recorder does not see (torch._C's own, from C++)
    (site,) = watch.after_cell(7)
    assert site.line is None and watch.lines() == ["CUDA was first initialised by cell [7]"]
    assert torch.cuda._lazy_init == cuda.lazy_init  # unwrapped once noted


# torch's functions that call the ``_lazy_init`` their module imported by name (CUDA is
# initialised there, and on the CPU build they fail right after, past the recorder's part)
THROUGH_ITS_OWN_COPY = {
    "torch.cuda.memory": lambda: torch.cuda.set_per_process_memory_fraction(0.5, 0),
    "torch.cuda.random": lambda: torch.cuda.get_rng_state(),
}


@pytest.mark.parametrize("module", sorted(THROUGH_ITS_OWN_COPY))
def test_cuda_initialised_through_a_modules_own_copy_is_noted_with_its_line(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    cuda = StandIn(monkeypatch)
    watch = FirstInit()
    watch.start()
    assert all(holder._lazy_init is not cuda.lazy_init for holder in cuda.holders)
    call = THROUGH_ITS_OWN_COPY[module]
    with pytest.raises((AssertionError, AttributeError, RuntimeError)):
        call()
    assert cuda.initialised
    (site,) = watch.after_cell(5)
    assert (site.cell, site.line) == (5, call.__code__.co_firstlineno)
    assert site.source.startswith(f'"{module}": lambda: torch.cuda.')
    assert all(holder._lazy_init is cuda.lazy_init for holder in cuda.holders)  # all put back


def test_a_module_imported_while_recording_is_put_back_too(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = StandIn(monkeypatch)
    watch = FirstInit()
    watch.start()
    late = types.ModuleType("late_cuda_user")
    late._lazy_init = torch.cuda._lazy_init  # type: ignore[attr-defined]  # `from torch.cuda import _lazy_init`
    monkeypatch.setitem(sys.modules, "late_cuda_user", late)
    late._lazy_init()  # type: ignore[attr-defined]
    assert [site.cell for site in watch.after_cell(2)] == [2]
    assert late._lazy_init is cuda.lazy_init  # type: ignore[attr-defined]


def test_already_initialised_before_watching_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = StandIn(monkeypatch)
    cuda.initialised = True
    watch = FirstInit()
    watch.start()
    assert torch.cuda._lazy_init == cuda.lazy_init  # nothing to record: no wrapper
    assert watch.lines() == ["CUDA was already initialised when torchdevice_magic started watching"]


def test_a_failed_initialisation_notes_nothing_and_stop_puts_torch_back() -> None:
    original = torch.cuda._lazy_init
    watch = FirstInit()
    watch.start()
    if not HAS_CUDA:
        # a CPU-only build asserts; a CUDA build on a machine without a driver raises
        with pytest.raises((AssertionError, RuntimeError), match=NO_CUDA_HERE):
            torch.ones(1, device="cuda")  # torch's C++ side calls torch.cuda._lazy_init
        assert watch.after_cell(1) == [] and torch.cuda._lazy_init is not original
    watch.stop()
    assert torch.cuda._lazy_init is original


def _torch_fork_error(monkeypatch: pytest.MonkeyPatch) -> RuntimeError:
    """torch's own _lazy_init, raising in what it takes for a forked child."""
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    with pytest.raises(RuntimeError) as info:
        torch.cuda._lazy_init()
    monkeypatch.undo()
    return info.value


def _accelerate_fork_error(cause: BaseException) -> RuntimeError:
    """notebook_launcher's error, its text rebuilt from accelerate's source as it raises it."""
    launchers = pytest.importorskip("accelerate.launchers")
    source = inspect.getsource(launchers.notebook_launcher)
    start = source.index("has been initialized before") - 200
    literal = re.search(r'raise RuntimeError\(\s*((?:f?"[^"\n]*"\s*)+)\)', source[start:])
    assert literal is not None
    text = eval(literal.group(1).replace("\n", " "), {"device_type": "cuda"})  # noqa: S307
    error = RuntimeError(text)
    error.__cause__ = cause
    return error


def test_the_real_fork_messages_are_explained_with_the_cell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch_error = _torch_fork_error(monkeypatch)
    assert "Cannot re-initialize CUDA in forked subprocess" in str(torch_error)
    launcher_error = _accelerate_fork_error(torch_error)
    cuda = StandIn(monkeypatch)
    watch = FirstInit()
    watch.start()
    torch.cuda._lazy_init()
    watch.after_cell(4)
    alone = _accelerate_fork_error(RuntimeError("the child's error"))
    assert str(alone).startswith(
        "CUDA has been initialized before the `notebook_launcher` could create a forked "
        "subprocess. This likely stems from an outside import"
    )
    for error in (torch_error, alone, launcher_error, RuntimeError("wrapped")):
        if error.args[0] == "wrapped":
            error.__context__ = launcher_error  # found in the exception chain too
        advice = fork_error_advice(error, watch.sites)
        assert advice is not None and advice.startswith("CUDA was first initialised by cell [4]")
        assert "restart the kernel" in advice and "cell [4]" in advice and "'spawn'" in advice
    assert fork_error_advice(RuntimeError("CUDA out of memory"), watch.sites) is None
    assert cuda.calls == 1
    unseen = fork_error_advice(torch_error, {})
    assert unseen is not None and "a cell torchdevice_magic did not see" in unseen


def test_the_hook_notes_the_cell_shows_it_and_explains_the_launcher_error(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``ip`` first: its teardown (unload: the session's own watch puts torch back) runs last
    from IPython.utils.capture import capture_output

    from torchdevice_magic.shell import get_session, load

    StandIn(monkeypatch)
    session = load(ip)
    monkeypatch.setattr(session.app, "first_init", FirstInit())  # this test's watch only
    session.app.first_init.start()

    def run(cell: str) -> str:
        with capture_output() as captured:
            ip.run_cell(cell, store_history=True)
        shown = "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
        return captured.stdout + captured.stderr + shown

    run("import torch\nx = torch.ones(2)")
    run("y = 1\ntorch.cuda._lazy_init()")
    cell = ip.execution_count - 1
    assert session.app.first_init.sites["cuda"].cell == cell
    shown = run("%devices --text")
    assert f"CUDA was first initialised by cell [{cell}], line 2: torch.cuda._lazy_init()" in shown
    text = _accelerate_fork_error(RuntimeError("Cannot re-initialize CUDA in forked subprocess."))
    shown = run(f"raise RuntimeError({str(text)!r})")
    assert f"torchdevice_magic: CUDA was first initialised by cell [{cell}]" in shown
    assert "restart the kernel" in shown
    assert get_session(ip) is session


def test_the_fork_advice_is_shown_once_above_the_traceback(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a user reads first, as a diagnosis is; the full traceback follows."""
    from IPython.utils.capture import capture_output

    from torchdevice_magic.shell import load

    StandIn(monkeypatch)
    session = load(ip)
    monkeypatch.setattr(session.app, "first_init", FirstInit())
    session.app.first_init.start()
    seen: list[tuple[str, str]] = []
    publish, show = session.publish, ip._showtraceback

    def published(data: dict[str, Any], metadata: Any = None) -> None:
        seen.append(("display", data.get("text/plain", "")))
        publish(data, metadata)

    def shown(etype: Any, value: Any, stb: list[str]) -> None:
        seen.append(("traceback", ip.InteractiveTB.stb2text(stb)))
        show(etype, value, stb)

    monkeypatch.setattr(session, "publish", published)
    monkeypatch.setattr(ip, "_showtraceback", shown)
    with capture_output():
        ip.run_cell("import torch\ntorch.cuda._lazy_init()", store_history=True)
        cell = ip.execution_count - 1
        text = _accelerate_fork_error(RuntimeError("Cannot re-initialize CUDA"))
        seen.clear()
        ip.run_cell(f"raise RuntimeError({str(text)!r})", store_history=True)
    assert [kind for kind, _ in seen] == ["display", "traceback"], seen
    assert seen[0][1].startswith(f"torchdevice_magic: CUDA was first initialised by cell [{cell}]")
    assert "notebook_launcher" in seen[1][1]


def test_the_fork_advice_for_a_scripts_error_leaves_a_capture(
    ip: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """%run shows a script's error itself (no exception handler sees it): the advice comes after
    the cell, and under %%capture it goes where the outermost cell shows its output."""
    from IPython.utils.capture import capture_output

    from torchdevice_magic.shell import load

    StandIn(monkeypatch)
    session = load(ip)
    monkeypatch.setattr(session.app, "first_init", FirstInit())
    session.app.first_init.start()
    script = tmp_path / "launch.py"
    text = _accelerate_fork_error(RuntimeError("Cannot re-initialize CUDA"))
    script.write_text(f"raise RuntimeError({str(text)!r})\n")
    with capture_output() as outer:
        ip.run_cell("import torch\ntorch.cuda._lazy_init()", store_history=True)
        cell = ip.execution_count - 1
        ip.run_cell(f"%%capture inner\n%run {script}", store_history=True)
    shown = [o.data.get("text/plain", "") for o in outer.outputs]
    advice = f"torchdevice_magic: CUDA was first initialised by cell [{cell}]"
    assert any(text.startswith(advice) for text in shown), shown
    captured = ip.user_ns["inner"]
    assert not any(advice in o.data.get("text/plain", "") for o in captured.outputs)


@pytest.mark.skipif(HAS_CUDA, reason="CUDA is initialised by other tests in this process")
def test_loading_wraps_torchs_lazy_init_and_unloading_puts_it_back(ip: Any) -> None:
    holders = (torch.cuda, torch.cuda.memory, torch.cuda.random)
    # the line recorder, CUDA untouched
    assert all(hasattr(module._lazy_init, "__wrapped__") for module in holders)
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert not any(hasattr(module._lazy_init, "__wrapped__") for module in holders)
    ip.run_line_magic("load_ext", "torchdevice_magic")
    assert not hasattr(torch.cuda._lazy_init.__wrapped__, "__wrapped__")  # never stacked


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize(
    "first_touch",
    [
        "c = a.to('cuda')",  # torch's C++ side calls torch.cuda._lazy_init
        "torch.cuda.set_per_process_memory_fraction(0.9)",  # torch.cuda.memory's own copy
        "state = torch.cuda.get_rng_state()",  # torch.cuda.random's own copy
    ],
)
def test_on_a_gpu_the_cell_and_line_that_first_touch_cuda_are_named(
    tmp_path: Path, first_touch: str
) -> None:
    """A fresh interpreter (CUDA not yet initialised) with the extension loaded in IPython's
    shell: a cell that only imports, then one whose second line first touches CUDA."""
    script = textwrap.dedent(
        f"""
        from IPython.testing.globalipapp import get_ipython
        ip = get_ipython()
        ip.run_cell("import torch", store_history=True)
        ip.run_line_magic("load_ext", "torchdevice_magic")
        ip.run_cell("a = torch.ones(3)", store_history=True)
        assert not __import__("torch").cuda.is_initialized()
        assert ip.run_cell("b = a * 2\\n" + {first_touch!r}, store_history=True).success
        from torchdevice_magic.shell import get_session
        print(get_session(ip).app.device_notes(processes=True))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert f"CUDA was first initialised by cell [3], line 2: {first_touch}" in done.stdout
    if first_touch.startswith("c = "):  # a tensor on the GPU: the allocator holds memory
        assert "cuda:0: " in done.stdout and "cached by PyTorch's allocator" in done.stdout
