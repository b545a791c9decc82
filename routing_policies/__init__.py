"""Fleets, the routing policy table, its versions, diffs, roles and the audit log."""
