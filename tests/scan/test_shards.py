"""DTensor and FSDP2 rows say which piece of the global tensor this rank holds ("shard 1 of 2")
and how big the whole is (``torchdevice_magic.scan.shards``)."""

from __future__ import annotations

from torchdevice_magic.scan.shards import shard_note


def test_a_shard_names_its_index_its_count_and_the_global_size() -> None:
    note = shard_note([1], [2], ["Shard(0)"], (8, 4), 4)
    assert note == "DTensor shard 1 of 2 (Shard(0)); global 8×4, 128 B"


def test_replicas_and_two_dimensional_meshes_name_each_dimension() -> None:
    assert shard_note([0], [4], ["Replicate()"], (1024, 1024), 2) == (
        "DTensor replica 0 of 4 (Replicate()); global 1024×1024, 2.0 MiB"
    )
    assert shard_note([1, 0], [2, 2], ["Shard(0)", "Replicate()"], (6,), 8) == (
        "DTensor shard 1 of 2, replica 0 of 2 (Shard(0), Replicate()); global 6, 48 B"
    )
    assert shard_note([0], [2], ["Partial(sum)"], (), 4) == (
        "DTensor partial 0 of 2 (Partial(sum)); global scalar, 4 B"
    )


def test_a_rank_outside_the_mesh_holds_no_piece() -> None:
    assert shard_note(None, [2], ["Shard(0)"], (8,), 4) == (
        "DTensor not on this rank (Shard(0)); global 8, 32 B"
    )
