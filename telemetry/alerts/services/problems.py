"""The `details` entry of a refused alert input: which field, and what it must be."""


def field_problem(field_name: str, message: str) -> dict[str, str]:
    """One entry of a refusal's `details` (`ValidationFailed`, `Conflict`)."""
    return {"field": field_name, "message": message}
