"""Debian's Mosquitto for the bench: one process per broker on a free loopback port, its own
config file and directory (never the system broker on 1883), anonymous, `set_tcp_nodelay true`,
no persistence, as tests/mqtt_broker.py starts it (that one is a pytest fixture module).

Three brokers are bridged as a cluster forwards a publish: the first (the "hub", where the
control plane publishes) bridges the fleet topics out to each of the others at QoS 1, so one
publish reaches the devices of every broker and the control plane's work stays one publish."""

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bridge_lines(name: str, port: int, prefix: str) -> list[str]:
    """Forward the fleet topics (what the control plane and the baseline publish) out to the
    broker on `port`. Device topics stay where they are published: a deployment bridges the
    acks, presence and telemetry `in` to where the control plane's link subscribes."""
    fleets = f"{prefix}/fleets/+"
    return [
        f"connection {name}",
        f"address 127.0.0.1:{port}",
        "cleansession true",
        "try_private true",
        "notifications false",
        "restart_timeout 1",
        f"topic {fleets}/state out 1",
        f"topic {fleets}/versions/+ out 1",
        f"topic {fleets}/cloud_pressure out 1",
        f"topic {fleets}/bench/baseline out 1",
    ]


@dataclass
class Broker:
    """One running mosquitto."""

    port: int
    directory: Path
    process: "subprocess.Popen[bytes]" = field(repr=False)

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        path = self.directory / "mosquitto.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def wait_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.port}: {self.log()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_brokers(count: int, directory: Path, prefix: str, popens: list[Any]) -> list[Broker]:
    """`count` brokers; the first bridges the fleet topics out to the others."""
    ports = [free_port() for _ in range(count)]
    brokers = []
    # The others first: the hub's bridges then connect at once.
    for index in reversed(range(count)):
        own = directory / f"broker-{index}"
        own.mkdir(parents=True, exist_ok=True)
        lines = [
            f"listener {ports[index]} 127.0.0.1",
            "allow_anonymous true",
            "set_tcp_nodelay true",
            "persistence false",
            "max_keepalive 65535",
            f"log_dest file {own / 'mosquitto.log'}",
            "log_type error",
            "log_type warning",
        ]
        if index == 0:
            for other in range(1, count):
                lines += bridge_lines(f"shard-{other}", ports[other], prefix)
        config = own / "mosquitto.conf"
        config.write_text("\n".join(lines) + "\n")
        process = subprocess.Popen(
            [MOSQUITTO, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        popens.append(process)
        broker = Broker(ports[index], own, process)
        broker.wait_listening()
        brokers.insert(0, broker)
    return brokers
