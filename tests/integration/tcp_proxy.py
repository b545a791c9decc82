"""A TCP proxy between SDK devices and a real server, standing in for the network between them.

It forwards bytes unchanged, except in the modes a real network (or a corporate proxy) has:
- "pass": everything goes through;
- "refuse_upgrade": a WebSocket upgrade request is answered `403` (as by a proxy that blocks
  WebSockets); plain HTTP goes through;
- "cut_responses": requests reach the server, but the connection is cut as soon as the server
  answers (a reply lost on a bad link: the server did the work, the device never heard);
- "down": new connections are refused at once and open ones are closed.
The mode can be switched at any time from any thread; it applies to bytes that pass from then on.
"""

import asyncio
import contextlib
from typing import Literal

Mode = Literal["pass", "refuse_upgrade", "cut_responses", "down"]

_REFUSAL = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class TcpProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to `upstream_port`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.mode: Mode = "pass"
        self.port = 0
        self.refused_upgrades = 0
        self.cut_responses = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self.drop_connections()

    async def drop_connections(self) -> None:
        """Close every open connection (both ends)."""
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "down":
            writer.close()
            return
        try:
            first = await reader.read(65536)
        except ConnectionError:
            writer.close()
            return
        if self.mode == "refuse_upgrade" and b"upgrade: websocket" in first.lower():
            self.refused_upgrades += 1
            writer.write(_REFUSAL)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        up_writer.write(first)
        await asyncio.gather(
            self._pump(reader, up_writer, towards_device=False),
            self._pump(up_reader, writer, towards_device=True),
            return_exceptions=True,
        )
        for end in (writer, up_writer):
            self._writers.discard(end)
            end.close()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, towards_device: bool
    ) -> None:
        try:
            while chunk := await source.read(65536):
                if self.mode == "down" or (towards_device and self.mode == "cut_responses"):
                    if towards_device and self.mode == "cut_responses":
                        self.cut_responses += 1
                    break
                sink.write(chunk)
                await sink.drain()
        finally:
            sink.close()
