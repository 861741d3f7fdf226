"""The rule for a rank's own device (``torchdevice_magic.devices``: which process is a rank,
which device is its own) and what it holds on another rank's device
(``torchdevice_magic.ranks``)."""

from __future__ import annotations

import pytest

from torchdevice_magic import devices, ranks
from torchdevice_magic.devices import RankInfo, own_device_index
from torchdevice_magic.records import Record

NO_RANK = RankInfo(rank=None, world_size=None, local_rank=None)


def test_a_process_that_is_no_rank_uses_its_current_device() -> None:
    assert not NO_RANK.is_rank
    assert own_device_index(NO_RANK, count=4, current=2) == 2


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        # the launcher's LOCAL_RANK names the device on this machine
        (RankInfo(rank=4, world_size=8, local_rank=1), 1),
        # a group without a launcher: ranks numbered machine by machine
        (RankInfo(rank=3, world_size=4, local_rank=None), 1),
        (RankInfo(rank=1, world_size=2, local_rank=None), 1),
        # the device the process group was bound to wins
        (RankInfo(rank=1, world_size=2, local_rank=1, bound_index=0), 0),
        # a LOCAL_RANK past the machine's devices is a launch mistake: the group rank decides
        (RankInfo(rank=2, world_size=4, local_rank=7), 0),
    ],
)
def test_a_rank_uses_its_own_local_device_not_the_current_one(
    info: RankInfo, expected: int
) -> None:
    assert info.is_rank
    assert own_device_index(info, count=2, current=0) == expected


def test_rank_info_reads_local_rank_from_the_environment() -> None:
    assert devices.rank_info({"LOCAL_RANK": "3"}).local_rank == 3
    assert devices.rank_info({"LOCAL_RANK": "three"}).local_rank is None
    assert devices.rank_info({}).local_rank is None
    assert devices.rank_info({"LOCAL_RANK": "1"}).label() == "local rank 1"
    assert RankInfo(1, 2, None).label() == "rank 1 of 2"


def _record(name: str, *devices: str, hidden: bool = False) -> Record:
    return Record(name, name, "tensor", "Tensor", devices, hidden=hidden)


def test_objects_on_another_ranks_device_are_found_and_nothing_else() -> None:
    records = [
        _record("mine", "cuda:1"),
        _record("theirs", "cuda:0"),
        _record("host", "cpu"),
        _record("shapes", "meta"),
        _record("model", "cpu", "cuda:0"),
        _record("_old", "cuda:0", hidden=True),
    ]
    rank_one = RankInfo(rank=1, world_size=2, local_rank=None)
    found = ranks.foreign_placements(records, "cuda:1", rank_one)
    assert found == [("theirs", "Tensor", "cuda:0"), ("model", "Tensor", "cuda:0")]
    # a process that is no rank may use any device it likes
    assert ranks.foreign_placements(records, "cuda:1", NO_RANK) == []
    line = ranks.foreign_warning("theirs", "Tensor", "cuda:0", "cuda:1", rank_one)
    assert line == (
        "theirs (Tensor) is on cuda:0, but this process is rank 1 of 2, whose device is "
        "cuda:1: move it with .to('cuda:1')"
    )
