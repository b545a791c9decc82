"""Change governance: change requests reviewed by another publisher before a publish (and,
if the fleet asks, before a rollout start or a switch), and the freeze after an automatic
rollback (docs/governance.md)."""
