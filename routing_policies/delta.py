"""Policy deltas (docs/PROTOCOL.md, "Policy deltas"): the format, its canonical hash, and how
a delta is made and applied, once, in `edge_sdk.delta`, which devices run too."""

from edge_sdk.delta import DeltaError, apply_delta, canonical_bytes, canonical_hash, make_delta

__all__ = ["DeltaError", "apply_delta", "canonical_bytes", "canonical_hash", "make_delta"]
