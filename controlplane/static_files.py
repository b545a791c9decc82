"""Static files (WhiteNoise) served without a warning under ASGI.

WhiteNoise 6 answers with a Django FileResponse over a file read synchronously. Django's ASGI
handler can only stream such a response by reading it whole in a thread, and warns
"StreamingHttpResponse must consume synchronous iterators" on every static file: in `make run`
that was a line on the console per page load. Here the response streams the same file through
an asynchronous iterator instead (each block read in a thread, so the event loop never waits on
the disk); sync callers (Django's test client) keep WhiteNoise's own iterator.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import IO, Any

from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, HttpRequest
from whitenoise.middleware import WhiteNoiseMiddleware

BLOCK_BYTES = 256 * 1024


async def _blocks(file: IO[bytes] | None) -> AsyncIterator[bytes]:
    if file is None:  # a 304, or a HEAD: headers only
        return
    while block := await asyncio.to_thread(file.read, BLOCK_BYTES):
        yield block


class StaticFilesMiddleware(WhiteNoiseMiddleware):  # type: ignore[misc]  # untyped
    """WhiteNoise whose file responses are asynchronous iterators for ASGI requests."""

    @staticmethod
    def serve(static_file: Any, request: HttpRequest) -> FileResponse:
        response: FileResponse = WhiteNoiseMiddleware.serve(static_file, request)
        if isinstance(request, ASGIRequest):
            # The file stays registered with the response, which closes it when sent.
            response.streaming_content = _blocks(response.file_to_stream)
        return response
