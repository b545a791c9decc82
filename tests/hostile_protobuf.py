"""Protobuf bytes built by hand, for the bad-input tests of every protobuf path: the wire
format's varint and field key, and the hostile payloads (truncated, oversized, only unknown
fields, nested past protobuf's limit, garbage) whatever the message."""

# A field number none of edge_sdk/wire/edge_routing.proto's messages has.
UNKNOWN_FIELD = 99


def varint(value: int) -> bytes:
    """`value` (>= 0) as a protobuf base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field_key(number: int, wire_type: int) -> bytes:
    """A field's key: its number and wire type (0 varint, 2 length-delimited, 3/4 group)."""
    return varint(number << 3 | wire_type)


def hostile_messages(valid: bytes, *, oversized_bytes: int) -> dict[str, bytes]:
    """Hostile versions of a message, by name, from a `valid` one: cut short, one field of
    `oversized_bytes` (past the receiver's limit), groups nested 20,000 deep (past protobuf's
    nesting limit), fields the schema does not have and nothing else, and bytes that are no
    protobuf at all."""
    return {
        "truncated": valid[:-5],
        "oversized": field_key(1, 2) + varint(oversized_bytes) + b"\x00" * oversized_bytes,
        "deep": field_key(UNKNOWN_FIELD, 3) * 20_000 + field_key(UNKNOWN_FIELD, 4) * 20_000,
        "unknown_only": field_key(UNKNOWN_FIELD, 0)
        + varint(7)
        + field_key(UNKNOWN_FIELD + 1, 2)
        + b"\x03abc",
        "garbage": bytes(range(256)) * 4,
    }


def with_unknown_fields(valid: bytes) -> bytes:
    """`valid` with fields a newer sender might add around it (ignored, as in JSON)."""
    before = field_key(UNKNOWN_FIELD, 2) + b"\x02hi"
    return before + valid + field_key(UNKNOWN_FIELD, 0) + varint(1)
