"""A module's plain tensor attributes (``self.pe = pe`` where ``register_buffer`` was meant):
``module.to()`` leaves them where they are, so after a move the row must say the module spans
devices, name the attribute and say why; their memory counts with the module. What torch
itself keeps as plain attributes on purpose (pruning's ``weight``, remade before each call)
is no such thing."""

from __future__ import annotations

import torch
import torch.nn.utils.prune as prune

import torchdevice_magic as tdm
from torchdevice_magic.scan import Scanner


class PositionalEncoding(torch.nn.Module):
    def __init__(self, d: int, n: int = 32) -> None:
        super().__init__()
        self.pe = torch.zeros(n, d)  # 32 * 8 * 4 = 1,024 B; not a buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pe[: x.size(1)]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.pos = PositionalEncoding(8)


def by_name(inventory):
    return {record.name: record for record in inventory.records}


def test_a_plain_tensor_attribute_left_on_the_cpu_is_named_with_the_fix() -> None:
    net = Net().to("meta")  # meta stands in for the accelerator: pe stays on the cpu
    inventory = tdm.scan({"net": net})
    record = by_name(inventory)["net"]
    assert record.devices == ("cpu", "meta")
    assert record.mixed
    assert "net.pos.pe on cpu is a plain tensor attribute, which .to() does not move" in (
        record.note
    )
    assert "register_buffer" in record.note
    assert inventory.totals() == {"cpu": 1024, "meta": 0}  # pe's memory is the module's
    (warning,) = inventory.mixed_warnings()
    assert warning.startswith("net spans cpu, meta — net.pos.pe on cpu is a plain tensor")


def test_together_with_its_parameters_it_is_counted_and_not_warned_about() -> None:
    inventory = tdm.scan({"net": Net()})
    record = by_name(inventory)["net"]
    assert record.devices == ("cpu",) and not record.mixed and record.note == ""
    assert record.bytes == 50 * 8 * 4 + 1024


def test_torchs_own_plain_attributes_and_0_dim_counters_are_not_left_behind() -> None:
    pruned = torch.nn.Linear(4, 4)
    prune.l1_unstructured(pruned, "weight", amount=0.5)  # weight: remade before each call
    counted = torch.nn.Linear(4, 4)
    counted.calls = torch.zeros((), dtype=torch.long)  # 0-dim: mixes with any device
    namespace = {"pruned": pruned.to("meta"), "counted": counted.to("meta")}
    records = by_name(tdm.scan(namespace))
    assert not records["pruned"].mixed
    assert not records["counted"].mixed


def test_a_rescan_sees_the_attribute_moved_and_one_added() -> None:
    net = Net().to("meta")
    namespace = {"net": net}
    scanner = Scanner()
    assert by_name(scanner.scan(namespace))["net"].mixed
    net.pos.pe = net.pos.pe.to("meta")  # the module's parameters and buffers are unchanged
    assert not by_name(scanner.scan(namespace, changed=["net"]))["net"].mixed
    plain = torch.nn.Linear(4, 4).to("meta")
    namespace["plain"] = plain
    scanner.scan(namespace)
    plain.mask = torch.ones(4)  # no parameter, buffer or submodule changed
    assert not by_name(scanner.scan(namespace, changed=["plain"]))["plain"].mixed
    # the hook passes the names whose attributes a cell set (`plain.mask = ...`)
    record = by_name(scanner.scan(namespace, reinspect=["plain"]))["plain"]
    assert record.mixed and "plain.mask on cpu is a plain tensor attribute" in record.note
