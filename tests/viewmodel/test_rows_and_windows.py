"""The view model: rows, sort orders, filters, windows, button states with reasons, and deltas
that reproduce a fresh window exactly (a property test over random namespace histories)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdevice_magic import scan
from torchdevice_magic import viewmodel as vm
from torchdevice_magic.viewmodel import Target, WindowSpec, rows
from torchdevice_magic.viewmodel import live as live_module

CPU_AND_META = (Target("cpu", True, ""), Target("meta", True, ""))
CPU_ONLY = (
    Target("cpu", True, ""),
    Target("cuda", False, "CUDA is not available in this kernel"),
    Target("meta", False, "moving to meta is turned off: meta tensors keep no data"),
)


def names(window: vm.Window) -> list[str]:
    return [row.name for row in window.rows]


def test_names_sort_naturally_x2_before_x10() -> None:
    inv = scan({f"x{i}": torch.ones(1) for i in (10, 2, 1, 100, 20)})
    shown = vm.window(inv.records, WindowSpec(sort="name"), None)
    assert names(shown) == ["x1", "x2", "x10", "x20", "x100"]


def test_size_sort_uses_real_bytes_and_grads_stand_apart() -> None:
    big = torch.ones(1000)  # 3.9 KiB
    small = torch.ones(300, requires_grad=True)
    small.grad = torch.ones(300)  # its grad does not make the row bigger than mid
    inv = scan({"small": small, "big": big, "mid": torch.ones(500)})
    rows = vm.window(inv.records, WindowSpec(), None).rows
    assert [r.name for r in rows] == ["big", "mid", "small"]
    by_name = {r.name: r for r in rows}
    assert by_name["small"].size == "1.2 KiB"
    assert by_name["small"].grad == "1.2 KiB"
    assert by_name["big"].grad == ""
    # one figure per row: no "+ grad" inside the size text
    assert all("grad" not in r.size for r in rows)


def test_module_size_is_its_data_and_its_grads_apart() -> None:
    model = torch.nn.Linear(100, 10)
    model(torch.ones(1, 100)).sum().backward()
    inv = scan({"model": model})
    (row,) = vm.window(inv.records, WindowSpec(), None).rows
    assert row.size_bytes == (1000 + 10) * 4
    assert row.grad_bytes == (1000 + 10) * 4
    assert row.shape == "1,010 params"
    head = vm.header(inv, CPU_ONLY)
    assert "gradients" in head.totals_note
    assert head.bars[0].bytes == 2 * (1010 * 4)


def test_meta_rows_say_what_they_would_need() -> None:
    inv = scan({"w": torch.empty(1024, device="meta")})
    (row,) = vm.window(inv.records, WindowSpec(), None).rows
    assert row.size == "0 B (meta; needs 4.0 KiB)"
    assert not row.action.enabled
    assert "cannot be moved" in row.action.reason


def test_a_row_whose_data_spans_devices_says_so() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    net[1].to("meta")
    pair = [torch.ones(2), torch.ones(2, device="meta")]  # a list: one row per tensor
    opt = torch.optim.SGD(net[0].parameters(), lr=0.1)
    inv = scan({"net": net, "x": torch.ones(3), "pair": pair, "opt": opt})
    by_name = {r.name: r for r in vm.window(inv.records, WindowSpec(), None).rows}
    assert by_name["net"].mixed and by_name["net"].device == "cpu, meta"
    assert by_name["net"].to_wire()["mixed"] is True
    assert not any(by_name[name].mixed for name in ("x", "pair[0]", "pair[1]", "opt"))


def test_filter_by_name_type_and_device() -> None:
    ns = {"alpha": torch.ones(2), "beta": torch.ones(2), "net": torch.nn.Linear(2, 2)}
    ns["ghost"] = torch.empty(3, device="meta")
    inv = scan(ns)
    assert names(vm.window(inv.records, WindowSpec(filter="ALP"), None)) == ["alpha"]
    assert names(vm.window(inv.records, WindowSpec(filter="linear"), None)) == ["net"]
    assert names(vm.window(inv.records, WindowSpec(filter="meta"), None)) == ["ghost"]
    shown = vm.window(inv.records, WindowSpec(filter="tensor cpu", sort="name"), None)
    assert names(shown) == ["alpha", "beta"]
    assert shown.matching == 2 and shown.total == 4


def test_paging_windows_cover_everything_once() -> None:
    inv = scan({f"t{i}": torch.ones(i + 1) for i in range(23)})
    seen = []
    for offset in range(0, 23, 5):
        page = vm.window(inv.records, WindowSpec(offset=offset, limit=5), None)
        assert page.matching == 23
        seen += names(page)
    assert seen == [f"t{i}" for i in range(22, -1, -1)]  # biggest first
    reverse = vm.window(inv.records, WindowSpec(reverse=True, limit=3), None)
    assert names(reverse) == ["t0", "t1", "t2"]


def test_default_target_is_not_the_cpu_when_another_device_is_enabled() -> None:
    assert vm.choose_target(CPU_AND_META, None, None) == "meta"
    assert vm.choose_target(CPU_ONLY, None, None) == "cpu"
    assert vm.choose_target(CPU_AND_META, "cpu", "meta") == "cpu"
    assert vm.choose_target(CPU_ONLY, "meta", None) == "cpu"  # disabled: not chosen


def test_buttons_are_enabled_only_when_useful_and_say_why_not() -> None:
    inv = scan({"x": torch.ones(3)})
    head = vm.header(inv, CPU_ONLY)
    assert head.target == "cpu"
    assert not head.move_all.enabled
    assert head.move_all.reason == "nothing to move: everything movable is already on cpu"
    assert not head.undo.enabled and head.undo.reason == "nothing to undo"
    (row,) = vm.window(inv.records, WindowSpec(), head.target).rows
    assert not row.action.enabled and row.action.reason == "x is already on cpu"
    assert not vm.move_selected_action(head, []).enabled

    head = vm.header(inv, CPU_AND_META)
    assert head.target == "meta" and head.move_all.enabled
    assert vm.move_selected_action(head, []).reason == "check rows to move them"
    assert vm.move_selected_action(head, ["x"]).enabled
    # undo on a CPU-only machine whose only other device is meta
    assert "only other device here is meta" in head.undo.reason
    assert vm.header(inv, CPU_AND_META, undo_summary="Moved 1 object").undo.enabled

    empty = vm.header(scan({}), CPU_AND_META)
    assert not empty.move_all.enabled and empty.move_all.reason == "nothing to move"
    assert empty.message


def test_an_optimizer_without_state_says_so() -> None:
    model = torch.nn.Linear(2, 2)
    inv = scan({"model": model, "opt": torch.optim.Adam(model.parameters())})
    rows = {r.name: r for r in vm.window(inv.records, WindowSpec(), "meta").rows}
    assert not rows["opt"].action.enabled
    assert "no state yet" in rows["opt"].action.reason
    assert rows["model"].action.enabled


def test_an_optimizer_without_state_says_where_its_parameters_are() -> None:
    """One rule for every view: the row of an optimizer without state names the device of the
    parameters it updates, and that the device is theirs; torch's SGD without momentum keeps
    no state at all (never "yet"). It holds no bytes of its own: totals, the devices the
    record holds data on and its button stay as they were."""
    model = torch.nn.Linear(2, 2)
    on_meta = torch.ones(3, device="meta")
    adam = torch.optim.Adam(model.parameters())
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    inv = scan({"model": model, "adam": adam, "sgd": sgd, "on_meta": on_meta})
    rows = {r.name: r for r in vm.window(inv.records, WindowSpec(), "meta").rows}
    assert rows["adam"].device == "cpu (params; no state yet)"
    assert rows["sgd"].device == "cpu (params; no state)"
    assert rows["sgd"].status == "keeps no state (SGD without momentum)"
    assert rows["sgd"].action.reason.startswith("sgd keeps no state (SGD without momentum)")
    assert "no state yet" in rows["adam"].action.reason and not rows["adam"].action.enabled
    records = {r.name: r for r in inv.records}
    assert records["adam"].devices == () and records["adam"].bytes == 0
    assert records["adam"].to_dict()["device"] == "cpu (params; no state yet)"
    assert inv.totals() == scan({"model": model, "on_meta": on_meta}).totals()
    # sorted and filtered by the device it names: among the cpu rows
    by_device = names(vm.window(inv.records, WindowSpec(sort="device"), None))
    assert by_device == ["model", "adam", "sgd", "on_meta"]
    assert set(names(vm.window(inv.records, WindowSpec(filter="cpu"), None))) == {
        "model",
        "adam",
        "sgd",
    }
    # with momentum SGD gets state at its first step; after a step the state's device shows
    sgd.param_groups[0]["momentum"] = 0.9
    model(torch.ones(2)).sum().backward()
    adam.step()
    rows = {
        r.name: r
        for r in vm.window(
            scan({"model": model, "adam": adam, "sgd": sgd}).records, WindowSpec(), None
        ).rows
    }
    assert rows["adam"].device == "cpu" and rows["adam"].size_bytes > 0
    assert rows["sgd"].device == "cpu (params; no state yet)"


def test_internal_codes_are_said_in_words() -> None:
    assert vm.in_words("not_on_expected_device") == (
        "a tensor is not on the device the operation expected"
    )
    assert vm.in_words("some_other_code") == "some other code"
    assert vm.in_words("x is already on cpu") == "x is already on cpu"


def test_output_history_is_listed_apart_from_the_totals() -> None:
    counts = vm.Tally("meta")
    hidden = scan({"Out": {3: torch.ones(250_000)}, "x": torch.ones(1)}, include_hidden=True)
    counts.add(hidden.records)
    note = vm.totals_note(counts)
    if counts.hidden:
        assert "+ 976.6 KiB held by output history" in note


def test_the_totals_note_counts_an_objects_gradients_and_state_once_whatever_names_reach_it() -> (
    None
):
    """A trainer holding the model and the optimizer that are also named, and the weight as
    ``w``: 257 KiB of gradients and 514 KiB of Adam state, not once per name. Taken away and
    put back record by record (as a live window does), the figures follow."""
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(4, 256)).sum().backward()
    opt.step()

    class Trainer:
        pass

    trainer = Trainer()
    trainer.model, trainer.opt = model, opt  # type: ignore[attr-defined]
    inventory = scan({"model": model, "opt": opt, "trainer": trainer, "w": model.weight})
    counts = vm.tally(inventory.records, None)
    grads, state = 257 * 1024, 514 * 1024 + 2 * 4  # and two 0-dim step counters
    assert (counts.grads, counts.optim) == (grads, state)
    assert "including 257.0 KiB of gradients and 514.0 KiB of optimizer state" in (
        vm.totals_note(counts)
    )
    by_name = {record.name: record for record in inventory.records}
    counts.add([by_name["trainer.model"], by_name["trainer.opt"]], -1)
    assert (counts.grads, counts.optim) == (grads, state)
    counts.add([by_name["model"], by_name["opt"]], -1)
    assert (counts.grads, counts.optim) == (256 * 1024, 0)  # w's own gradient is left
    counts.add([by_name["model"], by_name["opt"]])
    assert (counts.grads, counts.optim) == (grads, state)


# -- deltas: applied to the previous window they give exactly a fresh window ----------------------

_names = st.sampled_from([f"v{i}" for i in range(12)] + ["alpha", "Beta", "x2", "x10"])
_steps = st.lists(
    st.tuples(st.sampled_from(["bind", "delete", "grad", "module"]), _names, st.integers(1, 40)),
    min_size=1,
    max_size=8,
)
_specs = st.builds(
    WindowSpec,
    sort=st.sampled_from(vm.SORTS),
    reverse=st.booleans(),
    filter=st.sampled_from(["", "v", "x", "linear", "tensor", "1", "zzz"]),
    offset=st.integers(0, 6),
    limit=st.integers(1, 8),
    target=st.none(),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=_specs,
    history=st.lists(_steps, min_size=1, max_size=5),
    target=st.sampled_from(["cpu", "meta", None]),
)
def test_deltas_reproduce_a_fresh_window(spec, history, target) -> None:
    namespace: dict = {"base": torch.ones(5)}
    inventory = scan(namespace)
    live = vm.LiveWindow(spec)
    shown = live.reset(inventory.records, spec, target)
    assert shown == vm.window(inventory.records, spec, target)
    for steps in history:
        for action, name, size in steps:
            if action == "bind":
                namespace[name] = torch.ones(size)
            elif action == "delete":
                namespace.pop(name, None)
            elif action == "grad":
                tensor = torch.ones(size, requires_grad=True)
                tensor.grad = torch.ones(size)
                namespace[name] = tensor
            else:
                namespace[name] = torch.nn.Linear(size, 2)
        inventory = scan(namespace, previous=inventory, changed=tuple(namespace))
        delta = live.update(inventory.records)
        fresh = vm.window(inventory.records, spec, target)
        after = shown if delta is None else vm.apply_delta(shown, delta)
        assert after == fresh
        shown = after


def test_a_cell_that_changes_nothing_gives_no_delta() -> None:
    namespace = {f"t{i}": torch.ones(i + 1) for i in range(50)}
    inventory = scan(namespace)
    live = vm.LiveWindow(WindowSpec())
    live.reset(inventory.records, WindowSpec(), "meta")
    namespace["n"] = 3  # not tensor-related
    inventory = scan(namespace, previous=inventory, changed=("n",))
    assert live.update(inventory.records) is None
    assert not live.records_changed
    # a change outside the window: the counts change, not the rows
    live2 = vm.LiveWindow(WindowSpec(limit=5))
    live2.reset(inventory.records, WindowSpec(limit=5), "meta")
    namespace["t0"] = torch.ones(2)
    inventory = scan(namespace, previous=inventory, changed=("t0",))
    assert live2.update(inventory.records) is None
    assert live2.records_changed


@pytest.mark.parametrize("sort", vm.SORTS)
def test_every_sort_key_is_total(sort: str) -> None:
    inv = scan({"a": torch.ones(2), "b": torch.nn.Linear(2, 2), "c": [torch.ones(1)]})
    keys = [vm.sort_key(r, sort) for r in inv.records]
    assert len(set(keys)) == len(keys)


@settings(max_examples=60, deadline=None)
@given(target=st.sampled_from(["cpu", "cpu:0", "meta", "cuda", "cuda:0", "simdev", "simdev:0"]))
def test_the_tally_counts_exactly_the_rows_whose_button_is_enabled(target) -> None:
    model = torch.nn.Linear(2, 2)
    namespace = {
        "x": torch.ones(3),
        "m": torch.empty(4, device="meta"),
        "model": model,
        "opt": torch.optim.Adam(model.parameters()),
        "batch": {"a": torch.ones(2), "b": torch.empty(2, device="meta")},
        "Out": {3: torch.ones(5)},
    }
    records = scan(namespace, include_hidden=True).records
    enabled = sum(vm.row_action(r, target).enabled for r in records)
    assert vm.tally(records, target).actionable == enabled


@given(st.lists(st.text(alphabet="ab_XYé019٣.[]'", min_size=1, max_size=8), max_size=30))
def test_natural_keys_in_bulk_are_the_natural_keys(names) -> None:
    assert vm.natural_keys(names) == [vm.natural_key(name) for name in names]
    plain = [f"t{i}" for i in range(50)] + ["layer_10", "X2"]
    assert vm.natural_keys(plain) == [vm.natural_key(name) for name in plain]


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    st.sampled_from(["t", "t|T", "t|T|layer_|x_y"]),
    st.lists(st.text(alphabet="ab_XYé019٣.[]'İΣ", min_size=1, max_size=6), max_size=3),
    st.integers(0, 30),
    st.booleans(),
)
def test_natural_first_is_the_head_of_the_natural_order(
    data, prefixes, other, wanted, last
) -> None:
    """The names an edge keeps are those a sort by natural key puts first (last), whatever
    the mix of shapes: ``t12`` and ``layer_3`` (one prefix or several), leading zeros, case,
    digitless, and a few of other shapes (unicode digits, symbols) among them or none."""
    number = r"(|0|00|07|7|10|[1-9][0-9]{0,2}|[1-9][0-9]{20})"
    plain = data.draw(
        st.lists(st.from_regex(f"({prefixes}){number}", fullmatch=True), unique=True, max_size=40)
    )
    if data.draw(st.booleans()):
        other = []
    names = list(dict.fromkeys(plain + other))
    expected = sorted(range(len(names)), key=lambda i: vm.natural_key(names[i]), reverse=last)
    assert sorted(vm.natural_first(names, wanted, last)) == sorted(expected[:wanted])


@given(st.text(alphabet="ab_XY019.[]'", min_size=1, max_size=12))
def test_the_fast_natural_key_is_the_general_one(name) -> None:
    import re

    parts = re.split(r"(\d+)", name.lower())
    expected = (tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name)
    rows._natural_cache.pop(name, None)
    assert vm.natural_key(name) == expected


def test_the_diagnosis_and_the_table_show_one_size_for_a_model() -> None:
    """One truth: a model with gradients is the same figure in the table and in a diagnosis
    (gradients shown apart in the table's grad column)."""
    from torchdevice_magic import diagnose

    model = torch.nn.Linear(32, 32)
    model(torch.ones(1, 32)).sum().backward()
    x = torch.ones(1, 32, device="meta")
    namespace = {"model": model, "x": x}
    record = scan(namespace)["model"]
    row = vm.make_row(record, target=None)
    assert (
        record.grad_bytes > 0
        and row.size_bytes == record.data_bytes() == record.bytes - record.grad_bytes
    )
    try:
        model(x)
    except RuntimeError as error:
        found = diagnose(error, namespace, "model(x)", allow_meta=True)
    assert found is not None
    shown = {c.name: c.bytes for c in found.culprits}
    assert shown["model"] == row.size_bytes
    # and the text the user reads (it printed what the module needed, gradients included)
    assert f"model (Linear, {row.size}" in found.text(), found.text()


# -- the live window reads the scan's columns: equal to a window over every record ----------------

_row_names = st.sampled_from([f"v{i}" for i in range(10)] + ["x2", "x10", "Beta"])
_bindings = st.lists(
    st.tuples(
        st.sampled_from(
            ["plain"] * 4 + ["alias", "view", "delete", "grad", "module", "batch", "meta", "number"]
        ),
        _row_names,
        st.integers(1, 30),
    ),
    max_size=10,
)


def _bind(namespace: dict, action: str, name: str, size: int) -> None:
    tensors = sorted(k for k, v in namespace.items() if type(v) is torch.Tensor and v.numel())
    if action == "plain":
        namespace[name] = torch.ones(size)
    elif action in ("alias", "view") and tensors:
        other = namespace[tensors[size % len(tensors)]]
        namespace[name] = other if action == "alias" else other[:1]
    elif action == "delete":
        namespace.pop(name, None)
    elif action == "grad":
        tensor = torch.ones(size, requires_grad=True)
        tensor.grad = torch.ones(size)
        namespace[name] = tensor
    elif action == "module":
        namespace[name] = torch.nn.Linear(size % 4 + 1, 2)
    elif action == "batch":
        namespace[name] = {"a": torch.ones(size), "b": torch.empty(2, device="meta")}
    elif action == "meta":
        namespace[name] = torch.empty(size, device="meta")
    else:
        namespace[name] = size


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=_bindings,
    history=st.lists(st.tuples(_bindings, st.booleans()), max_size=6),
    spec=st.builds(
        WindowSpec,
        sort=st.sampled_from(vm.SORTS),
        reverse=st.booleans(),
        filter=st.sampled_from(["", "v", "x1", "linear", "tensor", "meta", "cpu", "'a'"]),
        offset=st.integers(0, 5),
        limit=st.integers(1, 6),
        target=st.none(),
    ),
    target=st.sampled_from(["cpu", "meta", None]),
    reserve=st.integers(0, 3),
)
def test_a_live_window_on_the_scans_columns_is_the_window_over_every_record(
    start, history, spec, target, reserve
) -> None:
    """What the sidebar shows (a head of the order chosen from the scan's columns, then kept
    up to date by the names that changed) equals a fresh window over every record of a fresh
    scan, after every cell: rows, order, counts. A tiny reserve makes the head run short."""
    namespace: dict = {"base": torch.ones(5)}
    for action, name, size in start:
        _bind(namespace, action, name, size)
    inventory = scan(namespace)
    kept = live_module.HEAD_RESERVE
    live_module.HEAD_RESERVE = reserve  # read by LiveWindow at each use
    try:
        live = vm.LiveWindow(spec)
        shown = live.reset(inventory, spec, target)
        reference = scan(namespace).records  # another scan: this one's records stay unbuilt
        assert shown == vm.window(reference, spec, target)
        assert live.counts == vm.tally(reference, target)
        for bindings, full in history:
            for action, name, size in bindings:
                _bind(namespace, action, name, size)
            if full:  # a move or a refresh looks at everything again
                inventory = scan(namespace)
            else:  # a cell: the hook passes the names it assigned
                touched = tuple(name for _, name, _ in bindings)
                inventory = scan(namespace, previous=inventory, changed=touched)
            delta = live.update(inventory)
            reference = scan(namespace).records
            after = shown if delta is None else vm.apply_delta(shown, delta)
            assert after == vm.window(reference, spec, target)
            assert live.window == after
            assert live.counts == vm.tally(reference, target)
            shown = after
    finally:
        live_module.HEAD_RESERVE = kept


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=_bindings, changes=_bindings)
def test_an_inventory_read_by_columns_and_names_is_its_records(start, changes) -> None:
    """view_columns + other_records + records_of give exactly Inventory.records, before and
    after an incremental rescan; a column's sort keys are its record's."""
    namespace: dict = {"base": torch.ones(5)}
    for action, name, size in start:
        _bind(namespace, action, name, size)
    first = scan(namespace)
    for action, name, size in changes:
        _bind(namespace, action, name, size)
    second = scan(namespace, previous=first, changed=tuple(namespace))
    for inventory, fresh in ((first, None), (second, scan(namespace))):
        columns = inventory.view_columns()
        by_name = {
            n: inventory.records_of(n)[0] for n in columns.names
        }  # records of the columns, one each
        listed = list(by_name.values()) + inventory.other_records()
        records = (fresh or inventory).records
        assert sorted(listed, key=lambda r: r.name) == sorted(records, key=lambda r: r.name)
        for record in records:
            assert record in inventory.records_of(record.root)
        assert columns.shared == {n for n, r in by_name.items() if r.shares_with}
        for name, device, size in zip(columns.names, columns.devices, columns.sizes, strict=True):
            record = by_name[name]
            assert (record.kind, record.type, record.devices) == ("tensor", "Tensor", (device,))
            assert record.bytes == record.would_need_bytes == size
            assert record.movable and not record.hidden and not record.grad_bytes
            for sort in vm.SORTS:
                assert live_module._column_sort_key(sort)(name, device, size) == vm.sort_key(
                    record, sort
                )


def test_opening_a_window_on_many_tensors_builds_records_only_for_its_head() -> None:
    namespace = {f"t{i}": torch.zeros(1 + i % 7) for i in range(3000)}
    inventory = scan(namespace)
    live = vm.LiveWindow(WindowSpec(limit=50))
    window = live.reset(inventory, WindowSpec(limit=50), "meta")
    assert [row.name for row in window.rows][:3] == ["t6", "t13", "t20"]  # 28 B, natural order
    assert window.matching == window.total == 3000
    assert inventory._records is None  # no record per tensor
    built = inventory._state.columns._records
    assert sum(r is not None for r in built) == len(live._head) <= 50 + vm.HEAD_RESERVE + 50
    # the next cell rebinds one name: its records then and now, nothing else
    namespace["t7"] = torch.zeros(1000)
    after = scan(namespace, previous=inventory, changed=("t7",))
    changes = after.view_changes(inventory)
    assert list(changes) == ["t7"]
    delta = live.update(after)
    assert delta is not None and [row.name for row in delta.upsert] == ["t7"]
    assert live.window.rows[0].name == "t7"
    assert after._records is None


def test_deleting_a_name_or_changing_its_rows_is_still_told_by_name() -> None:
    """`del x` and a name that now lists two rows keep the bookkeeping: the view hears of
    those names only (records then and now), not of the whole namespace again."""
    namespace = {f"t{i}": torch.zeros(2) for i in range(200)}
    first = scan(namespace)
    first.view_columns()  # a view opened: the bookkeeping starts here
    del namespace["t7"]
    second = scan(namespace, previous=first, changed=("t7",))
    changes = second.view_changes(first)
    assert list(changes) == ["t7"]
    assert [r.name for r in changes["t7"][0]] == ["t7"] and changes["t7"][1] == []
    namespace["t9"] = {"a": torch.ones(1), "b": torch.ones(2)}
    third = scan(namespace, previous=second, changed=("t9",))
    changes = third.view_changes(first)  # two cells at once
    assert sorted(changes) == ["t7", "t9"]
    assert [r.name for r in changes["t9"][1]] == ["t9['a']", "t9['b']"]
    assert sorted(r.name for r in third.records) == sorted(r.name for r in scan(namespace).records)
