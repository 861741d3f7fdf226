"""Release frees what it names through a real kernel (ipykernel over jupyter_client), the path
users take: each kind of holder made by cells, listed by ``%devices --holders``, released by
``%devices --release N`` or by ``tdm.holders(get_ipython().user_ns)[i].release()``, and a weak
reference made in the kernel proves the tensor is gone. ipykernel keeps more than an
in-process shell does (its display hook, the last execution result, the traceback a diagnosed
error leaves for ``%debug``): tests/shell/test_release.py is the in-process twin."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel
from shellcells import TRAINER_KEEPING_GRAPHS

pytestmark = pytest.mark.kernel


class Kernel:
    def __init__(self, client: Any) -> None:
        self.client = client

    def run(self, code: str) -> str:
        """Run one cell; its text (streams, results, displays, error names)."""
        parts: list[str] = []

        def collect(message: dict[str, Any]) -> None:
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                parts.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                parts.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                parts.append(f"{content['ename']}: {content['evalue']}")

        reply = self.client.execute_interactive(code, timeout=120, output_hook=collect)
        assert reply["content"]["status"] in ("ok", "error")
        return "\n".join(parts)

    def holders(self) -> list[str]:
        return re.findall(r"^\[\d+\] (.*)$", self.run("%devices --holders"), flags=re.M)

    def last_tensor_alive(self) -> bool:
        return self.run("gc.collect(); print(refs[-1]() is not None)").strip() == "True"


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        kernel = Kernel(client)
        kernel.run("%load_ext torchdevice_magic")
        kernel.run("import gc, torch, weakref\nimport torchdevice_magic as tdm\nrefs = []")
        yield kernel
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def display_a_tensor(kernel: Kernel, later_outputs: int) -> str:
    text = kernel.run("t = torch.randn(256, 64)\nrefs.append(weakref.ref(t))")
    assert text == ""
    kernel.run("t")  # shown: Out[n], _n, _ (and what IPython keeps besides)
    kernel.run("del t")
    for value in range(later_outputs):
        kernel.run(str(value))
    return "Out["


def fail_with_a_device_error(kernel: Kernel, later_cells: int) -> str:
    kernel.run(
        "weights = torch.ones(64, device='meta')\n"
        "def train():\n"
        "    batch = torch.randn(256, 64)\n"
        "    refs.append(weakref.ref(batch))\n"
        "    return batch + weights\n"
    )
    assert "Device mismatch" in kernel.run("train()")
    for value in range(later_cells):
        kernel.run(f"later = {value}")
    return "last error (RuntimeError)"


def fail_with_another_error(kernel: Kernel) -> str:
    kernel.run(
        "def train():\n"
        "    batch = torch.randn(256, 64)\n"
        "    refs.append(weakref.ref(batch))\n"
        "    return batch @ torch.ones(3, 3)\n"
    )
    assert "RuntimeError" in kernel.run("train()")
    return "last error (RuntimeError)"


def keep_a_second_name(kernel: Kernel) -> str:
    kernel.run("batch = torch.randn(256, 64)\nrefs.append(weakref.ref(batch))\nalias = batch")
    kernel.run("del batch")
    return "alias"


def keep_graphs_in_an_attribute(kernel: Kernel) -> str:
    kernel.run(TRAINER_KEEPING_GRAPHS)
    return "trainer.val_losses"


MAKERS = {
    "Out": lambda k: display_a_tensor(k, 0),
    "Out, two outputs later (___)": lambda k: display_a_tensor(k, 2),
    "a diagnosed device error": lambda k: fail_with_a_device_error(k, 0),
    "a device error, cells later (kept for %debug)": lambda k: fail_with_a_device_error(k, 2),
    "another error": fail_with_another_error,
    "a second name": keep_a_second_name,
    "an object's list of losses with their graphs": keep_graphs_in_an_attribute,
}


@pytest.mark.parametrize("kind", list(MAKERS))
def test_release_frees_each_holder_kind_in_a_real_kernel(kernel: Kernel, kind: str) -> None:
    label = MAKERS[kind](kernel)
    listed = kernel.holders()
    index = next(i for i, line in enumerate(listed) if line.startswith(label))
    assert kernel.last_tensor_alive()
    printed = kernel.run(f"%devices --release {index}")
    assert "freed 64.0 KiB" in printed, printed
    assert not kernel.last_tensor_alive(), f"{kind}: {printed}"


@pytest.mark.parametrize(
    "kind", ["Out", "a diagnosed device error", "a device error, cells later (kept for %debug)"]
)
def test_the_api_agrees_with_the_magic_and_frees_in_a_real_kernel(
    kernel: Kernel, kind: str
) -> None:
    label = MAKERS[kind](kernel)
    listed = kernel.holders()
    api = kernel.run("print(repr([h.line() for h in tdm.holders(get_ipython().user_ns)]))")
    assert api.strip() == repr(listed)
    printed = kernel.run(
        "found = tdm.holders(get_ipython().user_ns)\n"
        f"holder = next(h for h in found if h.where.startswith({label!r}))\n"
        "print('freed', holder.release())\n"
        "del found, holder"
    )
    assert "freed 65536" in printed, printed
    assert not kernel.last_tensor_alive(), kind
