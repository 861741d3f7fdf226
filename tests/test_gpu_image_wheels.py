"""``./dev gpu-check --image`` runs on a lent GPU machine with no network, whose image lacks
IPython and Jupyter: every package the code it runs imports must be there or among the wheels
``./dev gpu-wheels`` downloads (``.ci/gpucheck.py``). ``pytest -m cuda`` imports every test
module, so one new import in any test would stop the whole check there; this finds it here."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from importlib.metadata import packages_distributions
from pathlib import Path
from types import ModuleType

from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parent.parent
#: imported only where the GPU check never runs: the import-contract test (an importorskip
#: inside the test; ./dev test runs it with the dev venv)
NOT_ON_THE_GPU_PATH = {"grimp"}


def gpucheck() -> ModuleType:
    module = sys.modules.get("gpucheck")
    if module is None:
        spec = importlib.util.spec_from_file_location("gpucheck", ROOT / ".ci" / "gpucheck.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpucheck"] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


def imported_modules(source: str) -> set[str]:
    """Top-level names of every import in ``source``, at any depth (a function's own import,
    ``pytest.importorskip("x")`` and ``importlib.import_module("x")`` included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") in {"importorskip", "import_module"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return {name.split(".")[0] for name in names}


def sources_the_check_runs() -> dict[str, str]:
    """What ``gpu-check --image`` imports: the package, every test module (``-m cuda``
    collects them all), the move benchmark, and the notebooks' code cells (magics turned into
    Python as IPython turns them)."""
    cells = TransformerManager()
    found = {str(p): p.read_text() for p in (ROOT / "torchdevice_magic").rglob("*.py")}
    found |= {str(p): p.read_text() for p in (ROOT / "tests").rglob("*.py")}
    found[str(ROOT / "benchmarks" / "move.py")] = (ROOT / "benchmarks" / "move.py").read_text()
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for number, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            if cell["cell_type"] == "code":
                code = cells.transform_cell("".join(cell["source"]))
                found[f"{notebook.name} cell {number}"] = code
    return found


def test_every_package_the_gpu_check_imports_travels_or_is_on_the_image() -> None:
    check = gpucheck()
    available = set(check.WHEELS) | check.IMAGE_HAS
    distributions = packages_distributions()
    missing: dict[str, set[str]] = {}
    for where, source in sources_the_check_runs().items():
        for module in imported_modules(source):
            if module in sys.stdlib_module_names or module in NOT_ON_THE_GPU_PATH:
                continue
            if module == "torchdevice_magic":  # the checkout itself travels
                continue
            for distribution in distributions.get(module, []):  # none: the project's own
                if check.canonical(distribution) not in available:
                    missing.setdefault(distribution, set()).add(where)
    assert not missing, (
        "packages the GPU check imports that neither .ci/gpucheck.py's WHEELS nor the image "
        f"provides (add them to WHEELS, or to IMAGE_HAS if the image has them): "
        f"{ {name: sorted(places)[:3] for name, places in missing.items()} }"
    )


def test_the_scan_sees_imports_inside_functions_and_importorskip() -> None:
    source = "def f():\n    import a.b\n    from c import d\npytest.importorskip('e.f')\n"
    assert imported_modules(source) == {"a", "c", "e"}
