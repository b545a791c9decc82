"""REST API views: the policy table (`policy`), devices and rollouts (`rollout`)."""
