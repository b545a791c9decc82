"""The base of routing_policies' API serializers: each is an OpenAPI component named after it."""

from typing import Any

from rest_framework import serializers


# A comment, not a docstring: drf-spectacular would show a docstring as the description of
# every component whose serializer has none of its own.
class ApiSerializer(serializers.Serializer[Any]):
    # A serializer whose OpenAPI component is its class name less `Serializer` (`Rollout` for
    # `RolloutSerializer`); one whose component is named otherwise says so in its own
    # `Meta.ref_name`. Each subclass gets a `Meta` of its own: one inherited from its base would
    # give two serializers one component (and `closed_body` marks a component by that name).

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Meta" not in cls.__dict__:
            name = cls.__name__.removesuffix("Serializer")
            cls.Meta = type("Meta", (), {"ref_name": name})
