"""Fleets, the routing policy table, its versions, diffs and the audit log (roles are shared:
controlplane/roles.py)."""
