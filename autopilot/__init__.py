"""The θ autopilot (issue 27): each cell kept at its fleet's objective by the fleet's own
traffic, acting through the same services a person uses (docs/lab.md, "The autopilot")."""
