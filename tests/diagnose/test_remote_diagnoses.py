"""Reading the engines' diagnoses back in the client: from the ``engine_info`` ipyparallel keeps
on its errors (never from their text), equal ones merged, the engines (and ranks) named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from torchdevice_magic.diagnose import (
    ENGINE_INFO_KEY,
    Culprit,
    Diagnosis,
    FixLine,
    MoveAction,
    engine_diagnoses,
)

error = pytest.importorskip("ipyparallel.error")

MESSAGE = (
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
)


def diagnosis(device: str = "cuda:0") -> Diagnosis:
    return Diagnosis(
        message=MESSAGE,
        kind="mismatch",
        devices=(device, "cpu"),
        argument=None,
        operator=None,
        culprits=[
            Culprit("x", "cell", "Tensor", ("cpu",), 64),
            Culprit("model", "cell", "Linear", (device,), 144),
        ],
        fix=f'x = x.to("{device}")',
        note="",
        target=device,
        fix_lines=[FixLine("cell", f'x = x.to("{device}")')],
        action=MoveAction(("x",), device),
        origin="engine 0",
    )


def engine_info(engine: int, sent: Diagnosis | None, method: str = "execute", **identity: Any):
    info: dict[str, Any] = {"engine_uuid": f"u{engine}", "engine_id": engine, "method": method}
    if sent is not None:
        line = {"file": f"/tmp/ipykernel_{engine}/cell.py", "line": 3, "function": None}
        info[ENGINE_INFO_KEY] = json.loads(
            json.dumps(
                {
                    "diagnosis": sent.to_dict(),
                    "engine": {"engine_id": engine, **identity},
                    "line": {**line, "source": "y = model(x)"},
                }
            )
        )
    return info


def composite(*infos: dict[str, Any]) -> Any:
    elist = [("RuntimeError", MESSAGE, "traceback", info) for info in infos]
    return error.CompositeError("one or more exceptions raised in: execute", elist)


def test_equal_diagnoses_of_several_engines_are_shown_once_naming_them_all() -> None:
    found = engine_diagnoses(composite(engine_info(0, diagnosis()), engine_info(1, diagnosis())))
    assert found is not None
    assert found.text() == (
        "Device mismatch on engines 0, 1: x (Tensor, 64 B) is on cpu; model (Linear, 144 B) "
        "is on cuda:0.\n"
        'Fix: x = x.to("cuda:0")\n'
        "At line 3 of the cell: y = model(x)\n"
        'From the client, on the same engines: %px x = x.to("cuda:0")'
    )
    assert "Device mismatch on engines 0, 1" in found._repr_html_()


def test_different_diagnoses_are_shown_apart_and_ranks_are_named() -> None:
    rank = {"world_size": 2, "host": "node7"}
    found = engine_diagnoses(
        composite(
            engine_info(0, diagnosis("cuda:0"), rank=0, **rank),
            engine_info(1, diagnosis("cuda:1"), rank=1, **rank),
        )
    )
    assert found is not None
    assert [f.diagnosis.origin for f in found.findings] == [
        "engine 0 (rank 0 of 2 on node7)",
        "engine 1 (rank 1 of 2 on node7)",
    ]
    assert [f.engines for f in found.findings] == [(0,), (1,)]


def test_a_function_s_diagnosis_has_no_px_line_and_says_where_it_failed() -> None:
    sent = diagnosis()
    info = engine_info(0, sent, method="apply")
    info[ENGINE_INFO_KEY]["line"] = {
        "file": "/home/me/train.py",
        "line": 12,
        "function": "step",
        "source": "return model(x)",
    }
    found = engine_diagnoses(error.RemoteError("RuntimeError", MESSAGE, "tb", info))
    assert found is not None
    (finding,) = found.findings
    assert finding.px_line() == ""
    assert finding.text().endswith("At line 12 in step() (train.py): return model(x)")


def test_the_diagnosis_is_read_from_engine_info_never_from_the_text() -> None:
    # engines without the extension send nothing: the client has only the message
    assert engine_diagnoses(composite(engine_info(0, None), engine_info(1, None))) is None
    # the same data on an error that is not ipyparallel's is not read
    plain = RuntimeError(MESSAGE)
    plain.engine_info = engine_info(0, diagnosis())  # type: ignore[attr-defined]
    assert engine_diagnoses(plain) is None


def test_data_that_does_not_read_back_is_left_out() -> None:
    broken = engine_info(1, diagnosis())
    broken[ENGINE_INFO_KEY]["diagnosis"]["culprits"] = [{"name": "x", "colour": "red"}]
    found = engine_diagnoses(composite(engine_info(0, diagnosis()), broken))
    assert found is not None and [f.engines for f in found.findings] == [(0,)]
    assert engine_diagnoses(composite(broken)) is None


def test_an_already_displayed_px_error_is_read_through_to_the_engines() -> None:
    shown = error.AlreadyDisplayedError(composite(engine_info(0, diagnosis())))
    found = engine_diagnoses(shown)
    assert found is not None and found.findings[0].engines == (0,)


def test_a_diagnosis_survives_its_trip_as_plain_data() -> None:
    sent = diagnosis()
    back = Diagnosis.from_dict(json.loads(json.dumps(sent.to_dict())))
    assert back.text() == sent.text()
    assert back._repr_html_() == sent._repr_html_()
    assert back.action == sent.action and back.origin == "engine 0"
