"""The GPU check, and the wheels it needs on a GPU machine without a network.

    python3 .ci/gpucheck.py wheels [--dest .whl]
    python3 .ci/gpucheck.py check [--image] [--rehearse-without-cuda] [--browser] [-- PYTEST_ARGS]

``./dev gpu-wheels`` runs ``wheels``: it downloads, as cp312 manylinux x86_64 wheels, every package
the CUDA tests, the notebooks and the move benchmark import that the lent GPU machines' image
lacks (that image has Python 3.12, torch with CUDA, numpy, pandas, pytest, hypothesis,
accelerate ..., but no IPython or Jupyter), checks that each wheel's own requirements are met by
another wheel or by the image, and prints what would travel with the working tree.

``./dev gpu-check`` runs ``check`` with every step's failure kept for the end rather than stopping
at the first: (1) every CUDA-marked test, (2) ``benchmarks/move.py --check`` with its GPU targets
asserted, (3) the story notebooks in a real kernel (on cuda where there is one, 05's
out-of-memory section included). ``--image`` first installs ``.whl/*.whl`` into a folder on
PYTHONPATH and registers a kernel for this interpreter; the browser test cannot run there (no
chromium, no JupyterLab) and is named as skipped. ``--rehearse-without-cuda`` proves the same
mechanism on a machine without a GPU: CUDA skips are expected, the benchmark's "no CUDA device"
is the expected answer. Full logs go to $OUT (or a temporary folder); the summary at the end,
short enough to be read from the last lines of the output, has every result.

Standard library only: it runs under whatever Python holds torch.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: what the image lacks, pinned (the versions the development venv tests with); one version each:
#: two wheels of one package stop the install there
WHEELS = {
    # the IPython layer and its needs
    "ipython": "9.18.1",
    "ipython_pygments_lexers": "1.1.1",
    "decorator": "5.3.1",
    "jedi": "0.20.1",
    "parso": "0.8.7",
    "matplotlib_inline": "0.2.2",
    "pexpect": "4.9.0",
    "ptyprocess": "0.7.0",
    "prompt_toolkit": "3.0.53",
    "wcwidth": "0.9.4",
    "stack_data": "0.6.3",
    "executing": "2.3.0",
    "asttokens": "3.0.2",
    "pure_eval": "0.2.4",
    "traitlets": "5.16.1",
    "comm": "0.2.3",
    "ipywidgets": "8.1.9",
    "widgetsnbextension": "4.0.16",
    "jupyterlab_widgets": "3.0.17",
    # real kernels: the notebooks and the kernel tests
    "ipykernel": "7.4.0",
    "debugpy": "1.8.22",
    "jupyter_client": "8.10.0",
    "jupyter_core": "5.9.1",
    "platformdirs": "4.14.8",
    "nest_asyncio2": "1.7.4",
    "pyzmq": "27.3.0",
    "tornado": "6.6.1",
    "nbclient": "0.11.0",
    "nbformat": "5.11.1",
    "fastjsonschema": "2.22.3",
    "jsonschema": "4.26.0",
    "jsonschema_specifications": "2025.9.1",
    "referencing": "0.37.0",
    "rpds_py": "2026.9.1",
    # notebook 08 and tests/parallel (collected by `-m cuda`, which imports every test module)
    "ipyparallel": "9.2.0",
    # tests/trace/test_meta_opdb.py skips its whole module without it
    "expecttest": "0.3.0",
}
#: what the image already holds (its package list) that the wheels above or the project need
IMAGE_HAS = {
    # the wheels' requirements
    "attrs",
    "packaging",
    "psutil",
    "pygments",
    "python_dateutil",
    "tqdm",
    "typing_extensions",
    # the project's own imports (tests/test_gpu_image_wheels.py reads them)
    "accelerate",
    "hypothesis",
    "numpy",
    "pandas",
    "pytest",
    "pyyaml",
    "torch",
}
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (28, 27, 24, 17)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
#: what travels to the lent machine, wheels and working tree together
TRAVEL_LIMIT = 64 * 2**20
#: the sidebar's browser tests need chromium and JupyterLab, which the image does not have
BROWSER_TESTS = ROOT / "labextension" / "ui-tests"
NOTEBOOK_TESTS = [
    "tests/integration/test_notebooks.py",
    "tests/integration/test_notebook_memory.py",
]
SUMMARY_LINES = 12  # failures or skips listed per step in the summary


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


# -- wheels -------------------------------------------------------------------------------------


def download_wheels(dest: Path) -> int:
    dest.mkdir(exist_ok=True)
    for stale in dest.glob("*.whl"):
        name, version = stale.name.split("-")[:2]
        if WHEELS.get(canonical(name)) != version:
            stale.unlink()
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312"]
    command += ["--abi", "abi3", "--abi", "none"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += ["-d", str(dest), *(f"{name}=={v}" for name, v in WHEELS.items())]
    if subprocess.run(command, check=False).returncode != 0:
        print("error: pip could not download every wheel (see above)", file=sys.stderr)
        return 1
    unmet = unmet_requirements(dest)
    for line in unmet:
        print(f"error: {line}", file=sys.stderr)
    report_sizes(dest)
    return 1 if unmet or travelling_bytes(dest) > TRAVEL_LIMIT else 0


def unmet_requirements(dest: Path) -> list[str]:
    """Each wheel's Requires-Dist that applies on Linux x86_64 with CPython 3.12 and no extras,
    met neither by another wheel nor by the image (names only: versions are the rehearsal's)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip's own copy, where packaging is not installed
        from pip._vendor.packaging.requirements import Requirement
    environment = {"python_version": "3.12", "python_full_version": "3.12.3"}
    environment |= {"sys_platform": "linux", "platform_system": "Linux", "extra": ""}
    environment |= {"platform_machine": "x86_64", "implementation_name": "cpython"}
    wheels = {canonical(p.name.split("-")[0]): p for p in dest.glob("*.whl")}
    unmet = [f"no wheel for {name}=={v}" for name, v in WHEELS.items() if name not in wheels]
    for name, path in sorted(wheels.items()):
        with zipfile.ZipFile(path) as archive:
            metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            lines = archive.read(metadata).decode().splitlines()
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            requirement = Requirement(line.split(":", 1)[1].strip())
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            needed = canonical(requirement.name)
            if needed not in wheels and needed not in IMAGE_HAS:
                unmet.append(f"{name} requires {requirement}: neither a wheel nor on the image")
    return unmet


def travelling_bytes(dest: Path) -> int:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    tree = sum(
        (ROOT / os.fsdecode(p)).stat().st_size for p in listed if (ROOT / os.fsdecode(p)).is_file()
    )
    return tree + sum(p.stat().st_size for p in dest.glob("*.whl"))


def report_sizes(dest: Path) -> None:
    wheels = sorted(dest.glob("*.whl"), key=lambda p: p.stat().st_size, reverse=True)
    size = sum(p.stat().st_size for p in wheels)
    total = travelling_bytes(dest)
    print(f"{len(wheels)} wheels in {dest}: {size / 2**20:.1f} MiB (largest: ", end="")
    print(
        ", ".join(f"{p.name.split('-')[0]} {p.stat().st_size / 2**20:.1f}" for p in wheels[:3])
        + ")"
    )
    print(
        f"working tree and wheels together: {total / 2**20:.1f} MiB of the "
        f"{TRAVEL_LIMIT // 2**20} MiB that may travel"
    )


# -- check --------------------------------------------------------------------------------------


@dataclass
class Outcomes:
    """What a pytest run's JUnit XML says, test by test."""

    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "id: first line of the message"
    skipped: list[str] = field(default_factory=list)  # "id: reason"


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    lines: list[str]
    log: Path


@dataclass
class Context:
    python: str
    env: dict[str, str]
    logs: Path  # what comes back from a lent machine: at most 8 files there
    scratch: Path  # JUnit XML and the like, read here
    rehearsal: bool
    budget_end: float
    facts: list[str] = field(default_factory=list)


def run_logged(command: list[str], log: Path, context: Context, timeout: float) -> tuple[int, str]:
    """Run with the output both on the console and in ``log``; past ``timeout`` seconds the
    whole process group is killed (rc 124), so one hung step leaves time for the others."""
    with open(log, "w") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=context.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )

        lines: list[str] = []

        def copy() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                sys.stdout.write(line)
                out.write(line)
                lines.append(line)

        # a reader thread: a grandchild in its own session (a kernel) may hold the pipe open
        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        try:
            rc = process.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            rc, timed_out = process.wait(), True
        reader.join(timeout=10)
        sys.stdout.flush()
        out.flush()
    if timed_out:
        message = f"killed after {timeout:.0f} s (this step's share of the time)"
        with open(log, "a") as out:
            out.write(message + "\n")
        return 124, "".join(lines) + message
    return rc, "".join(lines)


def read_junit(path: Path) -> Outcomes:
    outcomes = Outcomes()
    if not path.exists():
        return outcomes
    for case in ElementTree.parse(path).iter("testcase"):
        where = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        test = f"{where}::{case.get('name')}" if case.get("name") else where
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skip = case.find("skipped")
        if problem is not None:
            first = (problem.get("message") or problem.text or "").strip().splitlines()
            outcomes.failed.append(f"{test}: {(first or ['?'])[0][:160]}")
        elif skip is not None:
            outcomes.skipped.append(f"{test}: {(skip.get('message') or '')[:160]}")
        else:
            outcomes.passed.append(test)
    return outcomes


def step_share(context: Context, share: float) -> float:
    """A step may use ``share`` of the time left, and never less than a minute."""
    return max(60.0, (context.budget_end - time.monotonic()) * share)


def pytest_step(
    name: str, targets: list[str], marker: list[str], context: Context, share: float
) -> Step:
    log, xml = context.logs / f"{name}.log", context.scratch / f"{name}.xml"
    command = [context.python, "-m", "pytest", *marker, "-q", "-rfEs", "--durations=10"]
    command += ["-p", "no:cacheprovider"]
    command += ["-o", "junit_family=xunit1", f"--junitxml={xml}", *targets]
    print(f"\n==> {name}: {' '.join(command[1:])}", flush=True)
    start = time.monotonic()
    rc, output = run_logged(command, log, context, step_share(context, share))
    seconds = time.monotonic() - start
    outcomes = read_junit(xml)
    lines = [
        f"{len(outcomes.passed)} passed, {len(outcomes.failed)} failed, "
        f"{len(outcomes.skipped)} skipped (pytest exit {rc})"
    ]
    ok = rc == 0 and not outcomes.failed and bool(outcomes.passed or outcomes.skipped)
    if rc not in (0, 1) or not (outcomes.passed or outcomes.failed or outcomes.skipped):
        # killed, collection broke, or pytest itself did: its last lines say why
        lines += ["pytest's last lines:", *output.strip().splitlines()[-SUMMARY_LINES:]]
    lines += [f"FAILED {t}" for t in outcomes.failed[:SUMMARY_LINES]]
    if len(outcomes.failed) > SUMMARY_LINES:
        lines.append(f"... {len(outcomes.failed) - SUMMARY_LINES} more failures in {log}")
    if outcomes.skipped and not context.rehearsal:
        # on a GPU, a CUDA test that skips is a check that did not happen
        ok = False
        lines += [f"SKIPPED, a miss {t}" for t in outcomes.skipped[:SUMMARY_LINES]]
        if len(outcomes.skipped) > SUMMARY_LINES:
            lines.append(f"... {len(outcomes.skipped) - SUMMARY_LINES} more skipped in {log}")
    elif outcomes.skipped:
        reasons: dict[str, int] = {}
        for test in outcomes.skipped:
            reason = test.split(": ", 1)[-1]
            reasons[reason] = reasons.get(reason, 0) + 1
        lines += [f"skipped {n}x (rehearsal, expected): {r}" for r, n in sorted(reasons.items())]
    return Step(name, ok, seconds, lines, log)


def benchmark_step(context: Context, share: float) -> Step:
    log = context.logs / "benchmark.log"
    command = [context.python, "benchmarks/move.py", "--check"]
    print(f"\n==> benchmark: {' '.join(command[1:])}", flush=True)
    start = time.monotonic()
    rc, output = run_logged(command, log, context, step_share(context, share))
    seconds = time.monotonic() - start
    tail = [line[:200] for line in output.strip().splitlines()[-SUMMARY_LINES:]]
    no_cuda = "no CUDA device: the GPU targets could not be checked" in output
    if rc == 0:
        return Step("benchmark", True, seconds, ["GPU targets met:", *tail], log)
    if context.rehearsal and rc == 1 and no_cuda:
        lines = ["rehearsal: it ran, and --check says the GPU targets could not be checked:"]
        return Step("benchmark", True, seconds, lines + tail, log)
    return Step("benchmark", False, seconds, [f"exit {rc}:", *tail], log)


def browser_tests_named() -> list[str]:
    """The CUDA-marked tests among the browser tests, read from their source (they cannot be
    collected where playwright is missing)."""
    named = []
    for path in sorted(BROWSER_TESTS.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d) == "pytest.mark.cuda" for d in node.decorator_list
            ):
                named.append(f"{path.relative_to(ROOT)}::{node.name}")
    return named


PREFLIGHT = """
import importlib, sys, torch
names = ("IPython", "ipykernel", "ipywidgets", "jupyter_client", "nbclient", "ipyparallel", "pandas")
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "| CUDA", torch.version.cuda, "| available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "| devices", torch.cuda.device_count())
for name in names:
    print(name, getattr(importlib.import_module(name), "__version__", "?"))
import torchdevice_magic
print("torchdevice_magic", torchdevice_magic.__version__, "from", torchdevice_magic.__file__)
"""


def install_wheels(context: Context, wheels: Path, site: Path) -> Step:
    """``--image``: the wheels into ``site`` (on PYTHONPATH), and a kernel for this Python."""
    log = context.logs / "setup.log"
    start = time.monotonic()
    found = sorted(wheels.glob("*.whl"))
    if not found:
        message = f"no wheels in {wheels}: run ./dev gpu-wheels where there is a network"
        log.write_text(message + "\n")
        return Step("setup", False, 0.0, [message], log)
    shutil.rmtree(site, ignore_errors=True)
    command = [context.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    command += ["--no-compile", "--no-cache-dir", "--target", str(site), *map(str, found)]
    print(f"\n==> setup: {len(found)} wheels into {site}", flush=True)
    rc, output = run_logged(command, log, context, 180)
    if rc == 0:
        # the notebooks ask for the "python3" kernel: this interpreter, with PYTHONPATH as here
        command = [context.python, "-m", "ipykernel", "install", "--user", "--name", "python3"]
        rc, output = run_logged(command, context.scratch / "kernel.log", context, 60)
        with open(log, "a") as out:
            out.write(output)
    seconds = time.monotonic() - start
    tail = output.strip().splitlines()[-SUMMARY_LINES:]
    return Step(
        "setup", rc == 0, seconds, [f"{len(found)} wheels installed"] if rc == 0 else tail, log
    )


def preflight(context: Context) -> Step:
    log = context.logs / "preflight.log"
    print("\n==> preflight: what this Python imports", flush=True)
    start = time.monotonic()
    rc, output = run_logged([context.python, "-c", PREFLIGHT], log, context, 120)
    lines = output.strip().splitlines()
    context.facts = lines if rc == 0 else []
    ok = rc == 0 and str(ROOT) in output
    if rc == 0 and not ok:
        lines.append(f"error: torchdevice_magic is not imported from this checkout ({ROOT})")
    # what imported, with versions, heads the summary: here only what went wrong
    return Step("preflight", ok, time.monotonic() - start, [] if ok else lines[-20:], log)


def print_summary(context: Context, steps: list[Step], skipped_browser: list[str]) -> bool:
    ok = all(step.ok for step in steps)
    text = ["", "=" * 30 + " gpu-check summary " + "=" * 30]
    text += [f"  {fact}" for fact in context.facts]
    if context.rehearsal:
        text.append("  REHEARSAL without CUDA: CUDA skips are expected; no GPU result was measured")
    for step in steps:
        verdict = "ok" if step.ok else "FAILED"
        text.append(f"[{verdict}] {step.name} ({step.seconds:.0f} s; full log {step.log})")
        text += [f"    {line}" for line in step.lines]
    for test in skipped_browser:
        text.append(f"[skipped, not a failure] {test}: a browser test (no chromium, no JupyterLab)")
    text.append(f"gpu-check: {'PASSED' if ok else 'FAILED'}")
    print("\n".join(text), flush=True)
    (context.logs / "summary.txt").write_text("\n".join(text) + "\n")
    return ok


def check(args: argparse.Namespace) -> int:
    out = os.environ.get("OUT")
    logs = Path(out) if out else Path(tempfile.mkdtemp(prefix="gpucheck-"))
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    scratch = Path(tempfile.mkdtemp(prefix="gpucheck-scratch-"))
    context = Context(sys.executable, env, logs, scratch, False, time.monotonic() + args.budget)
    try:
        return run_steps(context, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_steps(context: Context, args: argparse.Namespace) -> int:
    steps: list[Step] = []
    env = context.env
    if args.image:
        # kernels, IPython profiles and ipyparallel's files in a folder of their own
        for variable, folder in (
            ("JUPYTER_DATA_DIR", "jupyter-data"),
            ("JUPYTER_CONFIG_DIR", "jupyter-config"),
            ("IPYTHONDIR", "ipython"),
        ):
            env[variable] = str(context.scratch / folder)
        site = Path(args.site)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        steps.append(install_wheels(context, ROOT / ".whl", site))
    else:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    steps.append(preflight(context))
    cuda = any(f.startswith("torch ") and f.endswith("available True") for f in context.facts)
    if not cuda and not args.rehearse_without_cuda:
        steps[-1].ok = False
        steps[-1].lines.append(
            "no CUDA device: nothing was checked (--rehearse-without-cuda to try)"
        )
        print_summary(context, steps, [])
        return 1
    context.rehearsal = not cuda
    targets = ["tests"] + ([str(BROWSER_TESTS.relative_to(ROOT))] if args.browser else [])
    steps.append(
        pytest_step("cuda-tests", targets + args.pytest_args, ["-m", "cuda"], context, 0.5)
    )
    steps.append(benchmark_step(context, 0.3))
    steps.append(pytest_step("notebooks", NOTEBOOK_TESTS, [], context, 1.0))
    ok = print_summary(context, steps, [] if args.browser else browser_tests_named())
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    wheels = commands.add_parser("wheels", help="download the wheels the GPU image lacks")
    wheels.add_argument("--dest", default=str(ROOT / ".whl"))
    run = commands.add_parser("check", help="every CUDA test, the GPU benchmark, the notebooks")
    run.add_argument("--image", action="store_true", help="install .whl/ first; no browser test")
    run.add_argument("--browser", action="store_true", help="also the browser's CUDA test")
    run.add_argument(
        "--rehearse-without-cuda",
        action="store_true",
        help="without a GPU, run every step anyway (CUDA tests skip, the benchmark says so)",
    )
    run.add_argument(
        "--site",
        default=str(Path(tempfile.gettempdir()) / "torchdevice-magic-site"),
        help="--image: where the wheels are installed",
    )
    run.add_argument(
        "--budget",
        type=float,
        default=420.0,
        help="seconds for all steps, each killed past its share (a lent machine's command may "
        "run 10 minutes: this leaves room to start it and to read what it left)",
    )
    run.add_argument("pytest_args", nargs="*", help="after --: more arguments for the CUDA tests")
    args = parser.parse_args()
    if args.command == "wheels":
        return download_wheels(Path(args.dest))
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
