"""Cold start of each Lambda handler, with bytecode as deployed, as a ratio to boto3 alone.

What a cold start pays before its first AWS call is the handler's import plus the creation of
its first client (every handler's first call reads the session table: a DynamoDB client).
The baseline is the floor any Python function using the SDK pays: ``import boto3`` and
``boto3.client("dynamodb")``. Both are timed in the same run, the same way. A third mark adds
the rest of the first call's setup, its AWS calls aside: the settings, the app named by
``BIDE_APP`` (a one-line ``App()``) and, for the HTTP functions, the resolver.

As deployed: the bench copies the bundle layout into a scratch folder and compiles it the way
:mod:`bide.cdk.bundling` does (``compileall --invalidation-mode unchecked-hash``):

* ``fn/<name>/handler.py``: the function's entry module (``functions/<name>/handler.py``);
* ``code/``: the ``bide`` package, less ``cdk`` and ``scaffold`` (not bundled), and the app;
* ``layer/``: every installed package the probes import (pydantic, Powertools, ...) with
  its ``.dist-info``, and boto3/botocore, which Lambda's runtime provides.

Each trial is a fresh interpreter (``-I -S -B``: no site-packages, no environment paths, no
bytecode written) whose ``sys.path`` is the standard library (with its own bytecode), then
the function's folder, ``code/`` and ``layer/``, as Lambda's is. Inside the process the probe
reads ``time.process_time`` (CPU) and ``time.perf_counter`` (wall) at each mark, so
interpreter start-up is excluded (shown separately). CPU time is the figure to compare: on a
shared machine the wall time mostly measures waiting for a core. Targets alternate, each trial
running every target once in a fresh process, in reverse order every other trial; the median
of each is reported, and the ratio to the baseline is also taken per trial (a function against
the baseline of its own trial, measured seconds apart) with the median and quartiles of those
ratios, so a reader sees the machine's noise. The verdict is the median ratio's confidence
interval (:func:`median_interval`: distribution-free, from the ranks of the per-trial ratios;
at 15 trials it is about the quartiles, at 31 about the 33rd to 67th percentiles): met when
the whole interval is at or below the goal. More trials narrow it; the quartiles only describe
the noise, which more trials do not shrink.

A second figure does not move at all: the count of machine instructions the interpreter runs
for the import and the first client, under Valgrind's callgrind tool (when ``valgrind`` is
installed; one run per target, with a fixed hash seed), less those of an interpreter that
imports nothing. It weighs what the CPU does, not how long it waits for memory or the disk, so
it is the deterministic companion of the CPU time, not a replacement for it. Fake credentials
and a 127.0.0.1 endpoint: creating a client sends nothing, and nothing else is called.

Run from the repository root:  PYTHONPATH=shared python bench/bench_cold_start.py [trials]
"""

from __future__ import annotations

import compileall
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import timed_run
from cold_stats import CONFIDENCE, GOAL, median_interval, quartiles, verdict

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = ("worker", "signal", "api")
FIRST_CLIENT = "dynamodb"  # the first client each handler creates: all read the session first
NOT_BUNDLED = ("cdk", "scaffold")  # bide.cdk.bundling.NOT_BUNDLED (not imported: needs aws_cdk)
TRIALS = 31
TIMEOUT_S = 60.0
COUNT_TIMEOUT_S = 600.0  # a run under callgrind is some 50 times slower
BASELINE = "boto3"
# Extra rows, not the goal's baseline: boto3 and its client plus the other packages the
# handlers' path imports (pydantic and asyncio), so what Bide itself adds shows apart from
# what its dependencies cost; then Powertools' logger and metrics too, which the handlers
# imported until bide.service.logs and bide.service.emf replaced them (what that saved).
CORE_DEPENDENCIES = "core"
DEPENDENCIES = "deps"
# Extra row: the baseline's import with the collector paused, as the handlers import theirs
# (bide.handlers.load), so a reader sees what that alone is worth to the baseline.
PAUSED = "paused"

# Runs inside the fresh process. argv: target ("boto3" or a function's name), the service
# of the first client, then the folders to put after the standard library. Prints, for each
# mark (imported, client created, first call's setup done), the wall and CPU seconds since
# the start.
PROBE = """
import json, sys, time
target, service = sys.argv[1], sys.argv[2]
sys.path.extend(sys.argv[3:])
marks = []
def mark():
    marks.append((time.perf_counter() - began, time.process_time() - cpu))
began, cpu = time.perf_counter(), time.process_time()
if target in ("boto3", "core", "deps", "paused"):
    if target == "paused":
        # The baseline given the handlers' own treatment (bide.handlers.load): its import
        # with the collector paused, what it made frozen.
        import gc
        gc.disable()
    import boto3
    if target == "paused":
        gc.freeze()
        gc.enable()
    if target in ("core", "deps"):
        # What the handlers' path needs from other packages, less Bide itself: pydantic (one
        # small model built, as the engine's records are) and asyncio; then Powertools'
        # logger and metrics, which the handlers no longer import.
        import asyncio
        from pydantic import BaseModel
        class _Probe(BaseModel):
            id: str
            rev: int = 0
    if target == "deps":
        from aws_lambda_powertools import Logger
        from aws_lambda_powertools.metrics import MetricUnit
        from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
            AmazonCloudWatchEMFProvider,
        )
    mark()
    boto3.client(service)
    mark()
else:
    import handler
    mark()
    from bide.service.config import LazyClient
    LazyClient(service, sdk_retries=False).client  # what the handler's first call creates
    mark()
    # The rest of the first call's setup, its AWS calls aside: settings and the app
    # (handler.configured()) and, for an HTTP function, its resolver.
    deps = __import__("bide.handlers." + target, fromlist=["configured"]).configured()
    if target != "worker":
        from bide.service import http
        http._resolver_for(deps, http.SIGNAL if target == "signal" else http.API)
    mark()
print(json.dumps([marks, len(sys.modules)]))
"""

# Runs under callgrind: the import and the first client only (the goal's figure), then exits.
# argv as PROBE's; "pass" imports nothing (the interpreter's own start-up, subtracted).
COUNT_PROBE = """
import sys
target, service = sys.argv[1], sys.argv[2]
sys.path.extend(sys.argv[3:])
if target == "boto3":
    import boto3
    boto3.client(service)
elif target != "pass":
    import handler
    from bide.service.config import LazyClient
    LazyClient(service, sdk_retries=False).client
"""

# The app the functions load on their first call (BIDE_APP): the smallest a deployment has.
BENCH_APP = """from bide import App

app = App()
"""

# Lists the installed top-level packages the probes import (run once, with site-packages; what
# the site module itself imported is left out, as Lambda has no such site-packages).
CLOSURE = """
import sys
sys.path[:0] = sys.argv[1:]
before = set(sys.modules)
import boto3
boto3.client(%r)
for folder in %r:
    sys.modules.pop("handler", None)
    sys.path.insert(0, folder)
    import handler
    sys.path.pop(0)
from bide.handlers import api, signal, worker
from bide.service import http
from bide.service.config import LazyClient
worker.configured()
http._resolver_for(signal.configured(), http.SIGNAL)
http._resolver_for(api.configured(), http.API)
site = [p for p in sys.path if p.endswith("site-packages")]
tops = set()
for name, mod in list(sys.modules.items()):
    where = getattr(mod, "__file__", None) or ""
    if name not in before and any(where.startswith(p) for p in site):
        tops.add(name.split(".")[0])
print("\\n".join(sorted(tops)))
"""


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON"))}
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            # Never a real endpoint (creating a client sends nothing anyway).
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            # What a function's configuration holds (read on its first call).
            "BIDE_APP": "bench_app:app",
            "BIDE_TABLE": "bench-sessions",
            "BIDE_BUCKET": "bench-values",
            "BIDE_WAKE_QUEUE_URL": "http://127.0.0.1:9/000000000000/bench-wakes.fifo",
            "BIDE_WAKE_QUEUE_ARN": "arn:aws:sqs:us-east-1:000000000000:bench-wakes.fifo",
            "BIDE_SCHEDULE_GROUP": "bench-alarms",
            "BIDE_SCHEDULER_ROLE_ARN": "arn:aws:iam::000000000000:role/bench-scheduler",
            "BIDE_WEBHOOK_KEY_SECRET": "bench-webhook-key",
        }
    )
    return env


def installed_closure(scratch: Path, env: dict[str, str]) -> list[str]:
    """Top-level installed packages imported by boto3, its client and every handler."""
    folders = [str(scratch / "fn" / name) for name in HANDLERS]
    script = CLOSURE % (FIRST_CLIENT, folders)
    done = subprocess.run(
        [sys.executable, "-c", script, str(scratch / "code")],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"listing the imported packages failed:\n{done.stderr}")
    return done.stdout.split()


def build_bundle(scratch: Path, env: dict[str, str]) -> None:
    """The deployed layout under ``scratch``, compiled as :mod:`bide.cdk.bundling` does."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
    for name in HANDLERS:
        entry = ROOT / "functions" / name / "handler.py"
        if not entry.is_file():
            raise SystemExit(f"functions/{name}/handler.py is missing")
        (scratch / "fn" / name).mkdir(parents=True)
        shutil.copy2(entry, scratch / "fn" / name / "handler.py")
    (scratch / "code").mkdir()
    (scratch / "code" / "bench_app.py").write_text(BENCH_APP)
    package = ROOT / "shared" / "bide"
    for child in package.iterdir():
        if child.name in NOT_BUNDLED or child.name == "__pycache__":
            continue
        target = scratch / "code" / "bide" / child.name
        if child.is_dir():
            shutil.copytree(child, target, ignore=skip)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(child, target)
    layer = scratch / "layer"
    layer.mkdir()
    owners = importlib.metadata.packages_distributions()
    copied: set[str] = set()
    for top in installed_closure(scratch, env):
        found = importlib.util.find_spec(top)
        if found is None or found.origin is None:
            raise SystemExit(f"cannot find the installed package {top}")
        origin = Path(found.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, layer / top, ignore=skip)
        else:
            shutil.copy2(origin, layer / origin.name)
        for dist_name in owners.get(top, []):
            if dist_name in copied:
                continue
            copied.add(dist_name)
            dist = importlib.metadata.distribution(dist_name)
            info = Path(str(dist.locate_file(""))) / next(
                f.parts[0] for f in dist.files or [] if f.parts[0].endswith(".dist-info")
            )
            shutil.copytree(info, layer / info.name)
    ok = compileall.compile_dir(
        scratch,
        quiet=1,
        workers=0,
        invalidation_mode=compileall.py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    if not ok:
        raise SystemExit("compiling the scratch bundle failed")


Marks = list[tuple[float, float]]  # (wall s, CPU s) since the start, per mark


def probe(target: str, path: list[str], env: dict[str, str]) -> tuple[Marks, int]:
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", PROBE, target, FIRST_CLIENT, *path],
        env=env,
        cwd=path[-1],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"probing {target} with {path} failed:\n{done.stderr}")
    marks, modules = json.loads(done.stdout.strip().splitlines()[-1])
    return [tuple(m) for m in marks], modules


def instructions(target: str, path: list[str], env: dict[str, str]) -> int:
    """Machine instructions (callgrind's ``Ir``) a fresh interpreter runs for ``target``'s
    import and first client. The flags match the timed probe's ``-I`` but for ``-E``: the
    hash seed is fixed (``PYTHONHASHSEED=0``), so set and dict order, and so the count, are
    the same every run."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={os.devnull}",
            sys.executable,
            *("-s", "-S", "-B", "-P", "-c", COUNT_PROBE, target, FIRST_CLIENT, *path),
        ],
        env={**env, "PYTHONHASHSEED": "0"},
        cwd=path[-1],
        capture_output=True,
        text=True,
        timeout=COUNT_TIMEOUT_S,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"counting {target} with {path} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def counted(found: dict[str, tuple[str, list[str]]], env: dict[str, str]) -> dict[str, int]:
    """Instructions of the baseline and each function, less the interpreter's start-up; empty
    without valgrind. Two at a time: a count does not depend on what else runs."""
    if shutil.which("valgrind") is None:
        return {}
    labels = [BASELINE, *HANDLERS]
    jobs = {label: found[label] for label in labels}
    jobs["start-up"] = ("pass", found[BASELINE][1])
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {label: pool.submit(instructions, t, p, env) for label, (t, p) in jobs.items()}
        totals = {label: future.result() for label, future in futures.items()}
    start = totals.pop("start-up")
    return {label: total - start for label, total in totals.items()}


def interpreter_start(env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", "pass"], env=env, check=True, timeout=TIMEOUT_S
    )
    return time.perf_counter() - began


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else TRIALS
    env = environment()
    with tempfile.TemporaryDirectory(prefix="bide-cold-") as tmp:
        scratch = Path(tmp)
        build_bundle(scratch, env)
        code, layer = str(scratch / "code"), str(scratch / "layer")
        extra = (BASELINE, PAUSED, CORE_DEPENDENCIES, DEPENDENCIES)
        found = {label: (label, [layer]) for label in extra}
        for name in HANDLERS:
            found[name] = (name, [str(scratch / "fn" / name), code, layer])
        for target, path in found.values():  # warm the OS file cache
            probe(target, path, env)
        runs: dict[str, list[tuple[Marks, int]]] = {label: [] for label in found}
        starts = []
        for trial in range(trials):
            order = list(found.items())
            if trial % 2:
                order.reverse()
            for label, (target, path) in order:
                runs[label].append(probe(target, path, env))
            starts.append(interpreter_start(env))
        counts = counted(found, env)  # after the timed trials: it loads both cores
    report(runs, starts, trials)
    report_counts(runs, counts)


_ROW_NAMES = {
    BASELINE: "boto3 (baseline)",
    PAUSED: "boto3, gc paused",
    CORE_DEPENDENCIES: "+ pydantic, asyncio",
    DEPENDENCIES: "+ Powertools too",
}


def report(runs: dict[str, list[tuple[Marks, int]]], starts: list[float], trials: int) -> None:
    def median_ms(label: str, at: int, clock: int) -> float:
        return statistics.median(run[0][at][clock] for run in runs[label]) * 1000

    wall_base, cpu_base = median_ms(BASELINE, 1, 0), median_ms(BASELINE, 1, 1)
    print("Cold start with bytecode as deployed (compileall, unchecked-hash), a fresh process")
    print(f"per trial, median of {trials}, in ms of CPU time (wall time in brackets):")
    print("  import:  the handler module (boto3 for the baseline)")
    print(f"  +client: then its first client, {FIRST_CLIENT} (the goal: <= 1.3x the baseline)")
    print("  +setup:  then the rest of its first call's setup but the AWS calls: settings, a")
    print("           one-line app (BIDE_APP), the HTTP functions' resolver")
    print()
    head = f"    {'target':<18}{'import':>16}{'+client':>16}{'ratio':>12}{'+setup':>16}"
    print(f"{head}{'ratio':>12}{'modules':>9}")
    for label, run in runs.items():
        cells = ["-"] * 5
        for at in range(len(run[0][0])):
            cells[2 * at - (at > 0)] = (
                f"{median_ms(label, at, 1):.0f} ({median_ms(label, at, 0):.0f})"
            )
            if at >= 1:
                cpu = median_ms(label, at, 1) / cpu_base
                wall = median_ms(label, at, 0) / wall_base
                cells[2 * at] = f"{cpu:.2f} ({wall:.2f})"
        name = _ROW_NAMES.get(label, f"functions/{label}")
        widths = (16, 16, 12, 16, 12)
        line = "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))
        print(f"    {name:<18}{line}{run[0][1]:>9}")
    print()
    print("    boto3, gc paused: the baseline imported as the handlers import themselves, the")
    print("    collector paused and what the import made frozen (bide.handlers.load);")
    print("    + pydantic, asyncio: the baseline plus pydantic (one model built) and asyncio;")
    print("    + Powertools too: and Powertools' logger and metrics, which the handlers imported")
    print("    before their own JSON logs and EMF writer (extra rows, not the goal's baseline;")
    print("    the HTTP functions still load Powertools' event handler, in +setup)")
    print(f"    interpreter start-up alone: {statistics.median(starts) * 1000:.1f} ms (wall)")
    print(f"    Python {sys.version.split()[0]}, {os.cpu_count()} cores")


def report_counts(runs: dict[str, list[tuple[Marks, int]]], counts: dict[str, int]) -> None:
    """The goal's ratio two more ways: per trial (with its spread) and in instructions."""
    trials = len(runs[BASELINE])
    print()
    print("The goal's ratio (+client / the baseline's), per trial: each function's CPU time over")
    print("the baseline's in the same trial; the median of those ratios, its quartiles (the")
    print(f"noise) and the median's {CONFIDENCE:.0%} confidence interval (distribution-free,")
    print("from the ranks); best: the least CPU time of each over the trials, in ratio (a busy")
    print("machine only adds time). Then the count of machine instructions (callgrind; one run")
    print("each, hash seed fixed: the same count every run), less an empty interpreter's:")
    print()
    head = f"{'Q1':>7}{'median':>8}{'Q3':>7}{'median CI':>14}{'best':>7}{'Minstr':>8}{'ratio':>7}"
    print(f"    {'target':<18}{head}  verdict by the median's interval")
    base = runs[BASELINE]
    for label in (BASELINE, PAUSED, *HANDLERS):
        ratios = [run[0][1][1] / b[0][1][1] for run, b in zip(runs[label], base, strict=True)]
        q1, q2, q3 = quartiles(ratios)
        low, high = median_interval(ratios)
        name = _ROW_NAMES.get(label, f"functions/{label}")
        best = min(run[0][1][1] for run in runs[label]) / min(b[0][1][1] for b in base)
        interval = f"{low:.2f}-{high:.2f}"
        cells = f"{q1:>7.2f}{q2:>8.2f}{q3:>7.2f}{interval:>14}{best:>7.2f}"
        if label in counts:
            cells += f"{counts[label] / 1e6:>8.0f}{counts[label] / counts[BASELINE]:>7.2f}"
        else:
            cells += f"{'-':>8}{'-':>7}"
        print(f"    {name:<18}{cells}  {verdict(low, high) if label in HANDLERS else ''}")
    cpu = [run[0][1][1] * 1000 for run in base]
    q1, q2, q3 = quartiles(cpu)
    print()
    print(f"    the baseline's CPU ms over the trials: Q1 {q1:.0f}, median {q2:.0f}, Q3 {q3:.0f}")
    if not counts:
        print("    (no valgrind on PATH: no instruction counts)")
    print(f"    verdict ({trials} trials): met when the median ratio's interval lies at or below")
    print(f"    {GOAL}x, not met when it lies above; across it, this run cannot tell")


if __name__ == "__main__":
    with timed_run():
        main()
