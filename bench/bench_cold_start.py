"""Cold-start import time of each Lambda handler, as a ratio to ``import boto3`` alone.

Each trial is a fresh Python process (``-S``-free, the venv's interpreter) that puts the
handler's folder and ``shared/`` on ``sys.path`` as the Lambda bundle does, then times one
``import handler`` with ``time.perf_counter`` inside the process (interpreter start-up is
not included, and is shown separately). The baseline is ``import boto3`` timed the same way,
in the same run. Trials of all targets alternate; the median of each is reported.

The environment has fake credentials and no network: importing a handler must not create a
client or call AWS (the handlers build their clients on first use). Because of that the
first invocation imports boto3 later; "worker handler, then boto3" shows the sum a cold
worker pays by its first AWS call.

Run from the repository root:  PYTHONPATH=shared python bench/bench_cold_start.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = ("worker", "signal", "api")
TRIALS = 9
TIMEOUT_S = 60.0

# Runs inside the fresh process: argv[1] is what to import (comma-separated, in order), the
# rest go on sys.path first.
PROBE = """
import sys, time
sys.path[:0] = sys.argv[2:]
began = time.perf_counter()
for name in sys.argv[1].split(","):
    __import__(name)
print(time.perf_counter() - began)
"""


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env.pop("PYTHONPATH", None)  # each probe sets its own path, as a Lambda bundle does
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
            "PYTHONDONTWRITEBYTECODE": "1",  # leave the tree clean; .pyc files already cached
        }
    )
    return env


def targets() -> dict[str, tuple[str, list[str]]]:
    """Label -> (module to import, folders to put on sys.path)."""
    out = {"import boto3 (baseline)": ("boto3", [])}
    for name in HANDLERS:
        folder = ROOT / "functions" / name
        if not (folder / "handler.py").is_file():
            raise SystemExit(f"functions/{name}/handler.py is missing")
        out[f"functions/{name}/handler.py"] = ("handler", [str(folder), str(ROOT / "shared")])
    # The handlers create their clients on first use: the first invocation then imports boto3.
    worker = [str(ROOT / "functions" / "worker"), str(ROOT / "shared")]
    out["worker handler, then boto3"] = ("handler,boto3", worker)
    return out


def probe(module: str, path: list[str], env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module, *path],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"importing {module} from {path} failed:\n{done.stderr}")
    return float(done.stdout.strip().splitlines()[-1])


def interpreter_start(env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, timeout=TIMEOUT_S)
    return time.perf_counter() - began


def main() -> None:
    began = time.perf_counter()
    env = environment()
    found = targets()
    for module, path in found.values():  # warm the OS file cache and the .pyc files
        probe(module, path, env)
    times: dict[str, list[float]] = {label: [] for label in found}
    starts = []
    for trial in range(TRIALS):
        order = list(found.items())
        if trial % 2:
            order.reverse()
        for label, (module, path) in order:
            times[label].append(probe(module, path, env))
        starts.append(interpreter_start(env))
    medians = {label: statistics.median(t) * 1000 for label, t in times.items()}
    base = medians["import boto3 (baseline)"]
    print("Cold-start import time of each handler in a fresh process (fake credentials, no")
    print(f"network), median of {TRIALS} trials, as a ratio to `import boto3` in the same run.")
    print()
    print(f"    {'import':<30}{'median ms':>10}{'min ms':>9}{'max ms':>9}{'/ boto3':>9}")
    for label, t in times.items():
        ms = [x * 1000 for x in t]
        ratio = medians[label] / base
        print(f"    {label:<30}{medians[label]:>10.1f}{min(ms):>9.1f}{max(ms):>9.1f}{ratio:>9.2f}")
    print()
    start_ms = statistics.median(starts) * 1000
    print(f"    interpreter start-up alone (python -c pass): {start_ms:.1f} ms")
    print(f"    Python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print(f"\ntotal {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
