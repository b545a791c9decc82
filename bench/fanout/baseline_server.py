"""The baseline: a bare `websockets` server broadcasting one text to N connections.

No Django, no ASGI, no database, no Redis: it answers `hello` with `up_to_date`, ignores acks,
and on command broadcasts a prepared text (`websockets.asyncio.server.broadcast`, the
library's fastest path) to every connection or to a prepared subset of device ids. It runs on
uvloop like uvicorn, and accepts permessage-deflate exactly when the server under test does
(`--no-deflate` mirrors uvicorn's `--ws-per-message-deflate false`), so both write the same
bytes per device.

Control: one JSON command per line on stdin, one JSON answer per line on stdout.
- {"cmd": "prepare", "text": "...", "devices": null | [device_id, ...]}  → {"ok": true}
- {"cmd": "fire"}   → broadcast now → {"sent": n, "done_at": time.time()}
- {"cmd": "status"} → {"connections": n}
- {"cmd": "set_version", "version": 7} → what `up_to_date` answers carry

    python -m bench.fanout.baseline_server --port 8765
"""

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast, serve
from websockets.exceptions import ConnectionClosed

from .clients import run_loop


class Baseline:
    """Connections by device id and the prepared broadcast."""

    def __init__(self) -> None:
        self.connections: dict[str, ServerConnection] = {}
        self.version: int | None = None
        self.text = ""
        self.targets: list[str] | None = None

    async def handler(self, socket: ServerConnection) -> None:
        device_id = ""
        try:
            async for raw in socket:
                message = json.loads(raw)
                if message.get("type") == "hello":
                    device_id = str(message.get("device_id"))
                    self.connections[device_id] = socket
                    await socket.send(json.dumps({"type": "up_to_date", "version": self.version}))
                # acks and anything else: ignored
        except ConnectionClosed:
            pass
        finally:
            if device_id and self.connections.get(device_id) is socket:
                del self.connections[device_id]

    def command(self, command: dict[str, Any]) -> dict[str, Any]:
        name = command.get("cmd")
        if name == "prepare":
            self.text = command["text"]
            devices = command.get("devices")
            self.targets = list(devices) if devices is not None else None
            return {"ok": True}
        if name == "fire":
            if self.targets is None:
                sockets = list(self.connections.values())
            else:
                sockets = [self.connections[d] for d in self.targets if d in self.connections]
            broadcast(sockets, self.text)
            return {"sent": len(sockets), "done_at": time.time()}
        if name == "status":
            return {"connections": len(self.connections)}
        if name == "set_version":
            self.version = command["version"]
            return {"ok": True}
        return {"error": f"unknown command {name!r}"}


async def main_async(port: int, deflate: bool) -> None:
    baseline = Baseline()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with serve(
        baseline.handler,
        "127.0.0.1",
        port,
        backlog=2048,  # uvicorn's default
        max_size=2**20,
        compression="deflate" if deflate else None,
    ):
        print(json.dumps({"listening": port}), flush=True)
        while True:
            line = await reader.readline()
            if not line:
                return  # the driver is gone
            answer = baseline.command(json.loads(line))
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--no-deflate",
        action="store_true",
        help="refuse permessage-deflate (as uvicorn --ws-per-message-deflate false)",
    )
    args = parser.parse_args()
    run_loop(main_async(args.port, deflate=not args.no_deflate))


if __name__ == "__main__":
    main()
