"""A real Mosquitto for the tests: Debian's broker on a free loopback port, its own config and
directory, stopped when the test (or module) ends. Never the system broker on 1883.

`Broker.start(tmp)` runs it with anonymous access (`log_subscriptions=True`: each client's
SUBSCRIBE and UNSUBSCRIBE in its log, `Broker.subscriptions`);
`Broker.start(tmp, dynsec_admin=(user, pw))` loads the dynamic-security plugin with that admin
account (the control plane drives it); `Broker.start(tmp, tls=Certificates.make(tmp))` listens
with TLS only, its certificate signed by a private CA (`require_client_certificate=True`: mutual
TLS, a client needs a certificate of that CA too)."""

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
MOSQUITTO_CTRL = shutil.which("mosquitto_ctrl") or "/usr/bin/mosquitto_ctrl"
DYNSEC_PLUGIN = "/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so"


@dataclass(frozen=True)
class Certificates:
    """A private CA, a broker certificate for localhost and 127.0.0.1, and a client certificate
    (PEM files made by openssl)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    @classmethod
    def make(cls, directory: Path) -> "Certificates":
        directory.mkdir(parents=True, exist_ok=True)

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=test private CA", "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
        for name, names in (("server", "DNS:localhost,IP:127.0.0.1"), ("client", "")):
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                    "-keyout", f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
            extensions = directory / f"{name}.ext"
            extensions.write_text(f"subjectAltName={names}\n" if names else "")
            openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                    "-CAcreateserial", "-days", "2", "-extfile", str(extensions),
                    "-out", f"{name}.pem")  # fmt: skip
        return cls(
            ca=directory / "ca.pem",
            server_cert=directory / "server.pem",
            server_key=directory / "server.key",
            client_cert=directory / "client.pem",
            client_key=directory / "client.key",
        )


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    host: str
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    tls: Certificates | None = None

    @property
    def url(self) -> str:
        if self.tls is not None:  # the name its certificate carries
            return f"mqtts://localhost:{self.port}"
        return f"mqtt://{self.host}:{self.port}"

    @classmethod
    def start(
        cls,
        directory: Path,
        *,
        dynsec_admin: tuple[str, str] | None = None,
        host: str = "127.0.0.1",
        log_subscriptions: bool = False,
        tls: Certificates | None = None,
        require_client_certificate: bool = False,
        port: int | None = None,
    ) -> "Broker":
        if not os.path.exists(MOSQUITTO):
            if os.environ.get("CI") == "true":
                pytest.fail("CI=true but mosquitto is not installed (.ci/run installs it)")
            pytest.skip("needs mosquitto (apt-get install mosquitto)")
        directory.mkdir(parents=True, exist_ok=True)
        port = port or _free_port(host)  # a given port: a broker started again in its place
        lines = [
            f"listener {port} {host}",
            "set_tcp_nodelay true",
            "persistence false",
            f"log_dest file {directory / 'mosquitto.log'}",
            "log_type error",
            "log_type warning",
            "log_type notice",
        ]
        if log_subscriptions:  # "{client id} {qos} {topic}" per SUBSCRIBE, in the log file
            # (run as root, Mosquitto would switch to its own user, which cannot write here)
            lines += ["log_type subscribe", "log_type unsubscribe", f"user {getpass.getuser()}"]
        if tls is not None:  # read as this user (as root, Mosquitto would switch to its own)
            lines += [f"user {getpass.getuser()}"] * (not log_subscriptions)
            lines += [
                f"cafile {tls.ca}",
                f"certfile {tls.server_cert}",
                f"keyfile {tls.server_key}",
                f"require_certificate {str(require_client_certificate).lower()}",
            ]
        if dynsec_admin is None:
            lines.append("allow_anonymous true")
        else:
            state = directory / "dynamic-security.json"
            user, password = dynsec_admin
            subprocess.run(
                [MOSQUITTO_CTRL, "dynsec", "init", str(state), user, password],
                check=True,
                capture_output=True,
                input=b"",
            )
            lines += [
                "allow_anonymous false",
                f"plugin {DYNSEC_PLUGIN}",
                f"plugin_opt_config_file {state}",
            ]
        config = directory / "mosquitto.conf"
        config.write_text("\n".join(lines) + "\n")
        process = subprocess.Popen(
            [MOSQUITTO, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        broker = cls(host=host, port=port, directory=directory, process=process, tls=tls)
        broker._wait_listening()
        return broker

    def _wait_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.log()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.port}: {self.log()}")

    def subscriptions(self, client_id: str, topic: str) -> int:
        """How many times `client_id` subscribed to `topic` (with `log_subscriptions`)."""
        ending = f" {client_id} 1 {topic}"
        return sum(1 for line in self.log().splitlines() if line.endswith(ending))

    def log(self) -> str:
        path = self.directory / "mosquitto.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Broker]:
    """An anonymous Mosquitto of this test's own."""
    broker = Broker.start(tmp_path / "mosquitto")
    yield broker
    broker.stop()
