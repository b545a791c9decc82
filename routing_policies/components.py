"""The base of routing_policies' API serializers: each is an OpenAPI component named after it."""

from typing import Any, ClassVar

from rest_framework import serializers


# A comment, not a docstring: drf-spectacular would show a docstring as the description of
# every component whose serializer has none of its own.
class ApiSerializer(serializers.Serializer[Any]):
    # A serializer whose OpenAPI component is its class name less `Serializer` (`Rollout` for
    # `RolloutSerializer`), or its own `component_name` when it sets one. Each subclass gets a
    # `Meta.ref_name` of its own (what drf-spectacular and `closed_body` read): one inherited
    # from its base would give two serializers one component.

    Meta: ClassVar[type]
    component_name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("component_name") or cls.__name__.removesuffix("Serializer")
        cls.Meta = type("Meta", (), {"ref_name": name})
