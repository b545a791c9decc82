"""A webhook receiver for tests: a real HTTP server on 127.0.0.1, in a thread of the test."""

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.live_server import free_port


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1: answers each path's `statuses` in turn (then 200) and
    keeps every call."""

    statuses: dict[str, list[int]] = field(default_factory=dict)
    received: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                waiting = receiver.statuses.get(self.path)
                answer = waiting.pop(0) if waiting else 200
                receiver.received.append(
                    {
                        "path": self.path,
                        "delivery": self.headers.get("X-Alert-Delivery"),
                        "answered": answer,
                        "body": body,
                    }
                )
                self.send_response(answer)
                self.end_headers()
                self.wfile.write(b"ok" if answer == 200 else b"busy")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self) -> "Receiver":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
