"""bench/wire: bytes on the wire and CPU of the device link's encodings (issue 25)."""
