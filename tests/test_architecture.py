"""docs/architecture.md stays true: every module is described there, every test it cites
exists, and the pure core imports neither torch nor the IPython layer.

When one of these fails after you added a module: describe it in docs/architecture.md (what it
owns, what it may import, what it must never do) and put it in PURE_CORE or IPYTHON_LAYER below.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "torchdevice_magic"
SIDEBAR = ROOT / "labextension" / "src"
PAGE = ROOT / "docs" / "architecture.md"

#: top-level modules and subpackages that must work without IPython, ipywidgets, traitlets or
#: comm, and that never import torch themselves (only use it once the user has imported it)
PURE_CORE = {
    "objects", "records", "scan", "moves", "diagnose", "devices", "ranks", "names", "units", "trace",
    "memory", "viewmodel", "protocol", "render", "firstinit", "sourcefiles",
    "dryrun",
    "app",  # the controller: above the core, below the IPython layer, free of both
}  # fmt: skip
#: thin layers over the core that may import IPython / ipywidgets / traitlets / comm
IPYTHON_LAYER = {"shell"}
#: the package itself (lazy public API) and test support (imports torch: it registers a device)
OTHER = {"__init__", "testing"}

#: what the pure core must not pull in
SHELL_MODULES = ("IPython", "ipywidgets", "traitlets", "comm", "ipykernel")


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def _package_files() -> list[Path]:
    # the built sidebar under torchdevice_magic/labextension holds no Python
    return sorted(p for p in PACKAGE.rglob("*.py") if "labextension" not in p.parts)


def _top_level_names() -> set[str]:
    names = {p.stem for p in PACKAGE.glob("*.py")}
    names |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    return names


def test_every_module_of_the_package_is_named_in_the_page() -> None:
    page = _page()
    missing = []
    for path in _package_files():
        rel = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" and path.parent != PACKAGE:
            # a subpackage is named as a directory (`moves/`) or by its __init__
            wanted = (f"`{path.parent.name}/`", f"`{rel}`")
        else:
            wanted = (f"`{rel}`",)
        if not any(w in page for w in wanted):
            missing.append(rel)
    assert not missing, f"describe these in docs/architecture.md: {missing}"


def test_every_part_of_the_sidebar_is_named_in_the_page() -> None:
    page = _page()
    sources = sorted(p.name for p in SIDEBAR.glob("*.ts") if not p.name.endswith(".d.ts"))
    assert sources, "labextension/src has no TypeScript sources?"
    missing = [name for name in sources if f"`{name}`" not in page]
    assert not missing, f"describe these in docs/architecture.md: {missing}"


def test_every_module_is_placed_in_a_layer() -> None:
    """A new module is a decision: pure core or IPython layer (see the module docstring)."""
    assert not PURE_CORE & IPYTHON_LAYER
    unplaced = _top_level_names() - PURE_CORE - IPYTHON_LAYER - OTHER
    assert not unplaced, f"add these to PURE_CORE or IPYTHON_LAYER in this test: {unplaced}"


def test_every_test_the_page_cites_exists() -> None:
    cited = set(re.findall(r"`((?:tests|labextension/ui-tests)/[\w/]+\.py)::(\w+)`", _page()))
    assert len(cited) >= 20, "the rules table should cite the tests that guard each rule"
    missing = []
    for file, name in sorted(cited):
        path = ROOT / file
        if not path.exists():
            missing.append(f"{file} (no such file)")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        if name not in defined:
            missing.append(f"{file}::{name}")
    assert not missing, f"docs/architecture.md cites tests that do not exist: {missing}"


def test_the_page_links_the_recipes_and_draws_the_flow() -> None:
    page = _page()
    assert "](../CONTRIBUTING.md)" in page
    assert "```mermaid" in page
    assert (ROOT / "CONTRIBUTING.md").exists()


# --------------------------------------------------------------------------------------------
# Layering: each pure-core module imported alone in a fresh interpreter


def _pure_core_modules() -> list[str]:
    found = []
    for path in _package_files():
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[0] not in PURE_CORE:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append(".".join(["torchdevice_magic", *parts]))
    return sorted(found)


_CHILD = textwrap.dedent(
    """
    import importlib, json, sys
    modules, watched, torch_first = json.loads(sys.argv[1])
    if torch_first:
        import torch
    pulled = {}
    # the package first (its __init__ imports records and scanner), then each module alone;
    # a module is blamed together with the modules of ours it loaded for the first time
    for name in ["torchdevice_magic", *modules]:
        before = set(sys.modules)
        importlib.import_module(name)
        new = set(sys.modules) - before
        bad = sorted(m for m in new if m.split(".")[0] in watched)
        ours = sorted(m for m in new if m.startswith("torchdevice_magic"))
        pulled[name] = bad[:5] + (["(first loaded with: " + ", ".join(ours) + ")"] if bad else [])
    if torch_first:
        # and using the core pulls nothing in either: scan, view, move, diagnose, trace
        import torchdevice_magic as tdm
        ns = {"x": torch.ones(3), "model": torch.nn.Linear(2, 2), "batch": [torch.zeros(2)]}
        before = set(sys.modules)
        inventory = tdm.scan(ns)
        repr(inventory), inventory._repr_html_(), inventory.to_json()
        tdm.move(ns, "cpu")
        tdm.diagnose(RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:0 and cpu!"), ns, "model(x)")
        tdm.trace("y = x + 1", ns)
        new = set(sys.modules) - before
        pulled["<using scan, move, diagnose, trace>"] = sorted(
            m for m in new if m.split(".")[0] in watched
        )[:5]
    print(json.dumps(pulled))
    """
)


def _imports_in_a_fresh_interpreter(torch_first: bool, watched: tuple[str, ...]) -> dict:
    modules = _pure_core_modules()
    assert "torchdevice_magic.objects" in modules and "torchdevice_magic.moves.planner" in modules
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([modules, list(watched), torch_first])],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_pure_core_imports_neither_torch_nor_the_ipython_layer() -> None:
    pulled = _imports_in_a_fresh_interpreter(False, ("torch", *SHELL_MODULES))
    bad = {name: mods for name, mods in pulled.items() if mods}
    assert not bad, f"importing these pulled in torch or the IPython layer: {bad}"


@pytest.mark.timeout(300)
def test_pure_core_stays_free_of_the_ipython_layer_once_torch_is_imported() -> None:
    pulled = _imports_in_a_fresh_interpreter(True, SHELL_MODULES)
    bad = {name: mods for name, mods in pulled.items() if mods}
    assert not bad, f"these pulled in the IPython layer: {bad}"


# --------------------------------------------------------------------------------------------
# The shape of the import graph between the package's rooms (its top-level modules and
# subpackages): one way, shallow. import-linter (`lint-imports` in ./dev test) holds the layers;
# this says how deep they may grow.

MAX_ROOM_LEVELS = 10


def _room_imports() -> dict[str, set[str]]:
    grimp = pytest.importorskip("grimp")  # import-linter's graph builder (the test extra)
    graph = grimp.build_graph("torchdevice_magic", exclude_type_checking_imports=True)

    def room(module: str) -> str:
        return ".".join(module.split(".")[:2])

    rooms: dict[str, set[str]] = {}
    for module in graph.modules:
        if module == "torchdevice_magic":
            continue  # the package face imports whatever it offers
        targets = rooms.setdefault(room(module), set())
        for imported in graph.find_modules_directly_imported_by(module):
            if imported != "torchdevice_magic" and room(imported) != room(module):
                targets.add(room(imported))
    return rooms


def _levels(rooms: dict[str, set[str]]) -> dict[str, int]:
    levels: dict[str, int] = {}

    def level(room: str, path: tuple[str, ...]) -> int:
        assert room not in path, f"import circle between rooms: {' -> '.join((*path, room))}"
        if room not in levels:
            levels[room] = 1 + max((level(r, (*path, room)) for r in rooms[room]), default=0)
        return levels[room]

    for room in rooms:
        level(room, ())
    return levels


def test_rooms_import_one_way_and_stay_shallow() -> None:
    levels = _levels(_room_imports())
    assert max(levels.values()) <= MAX_ROOM_LEVELS, sorted(levels.items(), key=lambda x: -x[1])
    # the IPython layer sits on top, the leaves at the bottom
    assert levels["torchdevice_magic.shell"] == max(levels.values())
    for leaf in ("units", "records", "devices", "names"):
        assert levels[f"torchdevice_magic.{leaf}"] == 1


def test_the_level_count_sees_a_circle() -> None:
    with pytest.raises(AssertionError, match="import circle"):
        _levels({"a": {"b"}, "b": {"c"}, "c": {"a"}})
    assert _levels({"a": {"b"}, "b": set()}) == {"a": 2, "b": 1}


#: the longest a source file may be (DESIGN.md): a longer one is two things in one file
MAX_LINES = 600


def test_no_source_file_is_longer_than_600_lines() -> None:
    sources = [
        *PACKAGE.rglob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
        *SIDEBAR.rglob("*.ts"),
    ]
    long = {
        str(path.relative_to(ROOT)): n
        for path in sources
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these (DESIGN.md: every file <= {MAX_LINES} lines): {long}"
