"""Device tokens and fleet enrolment keys: long random strings, shown once, stored as SHA-256."""

import hashlib
import secrets

DEVICE_TOKEN_PREFIX = "dt_"
FLEET_KEY_PREFIX = "fk_"
MAX_TOKEN_CHARS = 200


def hash_secret(secret: str) -> str:
    """Tokens and keys are stored as SHA-256: they are long random strings, not passwords."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_device_token() -> str:
    """A fresh device token (what `device_enroll` hands out)."""
    return DEVICE_TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_fleet_key() -> str:
    """A fresh enrolment key of a fleet."""
    return FLEET_KEY_PREFIX + secrets.token_urlsafe(24)


def looks_like_device_token(token: str) -> bool:
    """Worth a lookup: the device-token prefix and not absurdly long."""
    return token.startswith(DEVICE_TOKEN_PREFIX) and len(token) <= MAX_TOKEN_CHARS
