"""bench/sim: simulated devices per core, against bare devices doing the same I/O, same run.

    .venv/bin/python -m bench.sim                                   # 500 1000 2000 devices
    .venv/bin/python -m bench.sim --devices 200 --measure 10        # a quick check

For each fleet size N: a lean control plane (bench/sim/lean_server.py, its own uvicorn
process, so the server never limits the clients) and, one after the other, two client
processes (bench/sim/worker.py): the bare baseline and the simulator, each with N devices at
`--rate-per-device` tasks/s. Each waits until all N are connected, settles, then measures its
own CPU time over `--measure` seconds. Reported: cores used, devices per core (N / cores),
and the ratio simulator CPU / baseline CPU per connected device.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from routing_policies.cell_schema import SEED_DIMENSIONS
from routing_policies.documents import build_document
from tests.live_server import _answers, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 30.0


def _demo_document() -> dict[str, Any]:
    """The demo fleet's v1 document (what `make run`'s devices receive)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from routing_policies.demo import demo_table

    return build_document(
        fleet_slug="bench-sim",
        number=1,
        published_at=None,
        dimensions={name: list(values) for name, values in SEED_DIMENSIONS.items()},
        table=demo_table(),
    )


def _start_server(policy_file: Path, port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.sim.lean_server:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--ws",
            "websockets-sansio",
            "--ws-per-message-deflate",
            "false",
            "--no-access-log",
            "--log-level",
            "warning",
            "--backlog",
            "4096",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "LEAN_POLICY_FILE": str(policy_file)},
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not _answers(f"http://127.0.0.1:{port}/healthz"):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit("the lean server did not start")
        time.sleep(0.1)
    return server


def _worker(
    mode: str, url: str, devices: int, rate: float, measure: float, connect_rate: float
) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "bench.sim.worker",
        "--mode",
        mode,
        "--url",
        url,
        "--devices",
        str(devices),
        "--rate-per-device",
        str(rate),
        "--measure",
        str(measure),
        "--connect-rate",
        str(connect_rate),
    ]
    done = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=measure + 300, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode} worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--rate-per-device", type=float, default=0.1, help="tasks/s (0.1)")
    parser.add_argument("--measure", type=float, default=20.0, help="seconds measured (20)")
    parser.add_argument("--connect-rate", type=float, default=100.0, help="devices/s (100)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-sim-") as scratch:
        policy_file = Path(scratch) / "policy.json"
        policy_file.write_text(json.dumps(_demo_document()))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = _start_server(policy_file, port)
        results: list[dict[str, Any]] = []
        try:
            print(
                f"{'devices':>8} {'tasks/s':>8} {'bare cores':>10} {'sim cores':>9}"
                f" {'bare dev/core':>13} {'sim dev/core':>12} {'sim/bare CPU':>12}"
                f" {'sim RSS MB':>10}",
                flush=True,
            )
            for devices in args.devices:
                for_each = (url, devices, args.rate_per_device, args.measure, args.connect_rate)
                bare = _worker("bare", *for_each)
                sim = _worker("sim", *for_each)
                row: dict[str, Any] = {"devices": devices, "bare": bare, "sim": sim}
                results.append(row)
                # Per device actually connected through the measured window.
                bare_n, sim_n = bare["connected_at_end"], sim["connected_at_end"]
                ratio = (sim["cpu_s"] / sim_n) / (bare["cpu_s"] / bare_n)
                row["sim_over_bare_per_device"] = ratio
                print(
                    f"{devices:>8} {sim['tasks_per_s']:>8.1f} {bare['cores']:>10.3f}"
                    f" {sim['cores']:>9.3f} {bare_n / max(bare['cores'], 1e-9):>13.0f}"
                    f" {sim_n / max(sim['cores'], 1e-9):>12.0f} {ratio:>12.2f}"
                    f" {sim['max_rss_mb']:>10.0f}"
                    + (
                        f"  (connected: bare {bare_n}, sim {sim_n})"
                        if min(bare_n, sim_n) < devices
                        else ""
                    ),
                    flush=True,
                )
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=2))
    return 0
