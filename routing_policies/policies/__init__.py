"""Policies: fleets, policy versions and their cells, validation, documents and diffs, the
audit log, the editor pages and the policy API."""
