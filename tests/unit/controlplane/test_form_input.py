"""A page's form goes through the API's own input serializer (controlplane.pages.form_input):
what the page posts is typed by the serializer's fields, and a refusal names the field."""

from typing import Any

import pytest
from django.http import QueryDict
from rest_framework import serializers

from controlplane.api import (
    JsonBooleanField,
    JsonChoiceField,
    JsonFloatField,
    JsonIntegerField,
    JsonStringField,
)
from controlplane.exceptions import ValidationFailed
from controlplane.pages import form_input


class _Input(serializers.Serializer[Any]):
    version = JsonIntegerField(min_value=1, label="the version")
    stage = JsonChoiceField(choices=[5, 25, 100], required=False)
    share = JsonFloatField(min_value=0, max_value=1, required=False)
    note = JsonStringField(max_length=20, required=False)
    urgent = JsonBooleanField(required=False)
    cells = serializers.ListField(child=JsonIntegerField(), required=False)


def _posted(text: str) -> QueryDict:
    return QueryDict(text)


def test_form_input__strings_posted__typed_as_the_serializer_declares() -> None:
    values = form_input(
        _Input, _posted("version=3&stage=25&share=0.5&note=hi&urgent=on&cells=1&cells=2&x=9")
    )
    assert values == {
        "version": 3,
        "stage": 25,
        "share": 0.5,
        "note": "hi",
        "urgent": True,
        "cells": [1, 2],
    }


def test_form_input__unticked_box_and_blank_optional__false_and_left_out() -> None:
    assert form_input(_Input, _posted("version=1&share=&note=")) == {
        "version": 1,
        "urgent": False,
    }


@pytest.mark.parametrize(
    ("posted", "field"),
    [
        ("version=x", "version"),
        ("version=0", "version"),
        ("version=", "version"),
        ("", "version"),
        ("version=1&stage=7", "stage"),
        ("version=1&share=2", "share"),
        ("version=1&share=nan", "share"),
        ("version=1&note=" + "a" * 21, "note"),
        ("version=1&urgent=maybe", "urgent"),
        ("version=1&cells=1&cells=y", "cells[1]"),
    ],
)
def test_form_input__bad_value__refused_naming_the_field(posted: str, field: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        form_input(_Input, _posted(posted))
    assert refused.value.details[0]["field"] == field


def test_form_input__refusal__message_starts_with_the_fields_label() -> None:
    with pytest.raises(ValidationFailed) as refused:
        form_input(_Input, _posted("version=x"))
    assert refused.value.message == "The version: A valid integer is required."


class _RefField(serializers.Field):  # type: ignore[type-arg]
    """A number or a name, as the lab's version references: its own `form_value` reads text."""

    def form_value(self, text: str) -> int | str:
        return int(text) if text.isdigit() else text

    def to_internal_value(self, data: Any) -> int | str:
        if data == "draft" or (isinstance(data, int) and not isinstance(data, bool)):
            return data  # type: ignore[no-any-return]
        self.fail("invalid")

    def to_representation(self, value: Any) -> Any:
        return value


class _RefInput(serializers.Serializer[Any]):
    version = _RefField()


@pytest.mark.parametrize(("posted", "typed"), [("version=7", 7), ("version=draft", "draft")])
def test_form_input__field_with_its_own_form_value__reads_the_text_its_way(
    posted: str, typed: int | str
) -> None:
    assert form_input(_RefInput, _posted(posted)) == {"version": typed}
