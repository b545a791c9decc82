"""Old import path, kept for telemetry/services/{alerts,guards}.py until they import
`routing_policies.policies.audit`; nothing in routing_policies uses it."""

from ..policies.audit import Actor, audit_record

__all__ = ["Actor", "audit_record"]
