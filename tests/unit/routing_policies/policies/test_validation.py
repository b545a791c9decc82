"""Validation of cells, dimensions and whole tables: refused values name their cell and field."""

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.exceptions import ValidationFailed
from routing_policies.cell_schema import (
    CELL_FIELDS,
    DEFAULT_CELL_VALUES,
    SEED_DIMENSIONS,
    WEIGHT_PATHS,
    CellKey,
    document_cell,
)
from routing_policies.demo import demo_table
from routing_policies.documents import build_document, ordered_keys
from routing_policies.policies.schemas import document_input
from routing_policies.validation import (
    Problem,
    table_problems,
    validate_cell,
    validate_coverage,
    validate_dimensions,
)

NORMAL: CellKey = ("text", "interactive", "normal")
SENSITIVE: CellKey = ("text", "interactive", "sensitive")
NUMERIC_FIELDS = [spec.path for spec in CELL_FIELDS if spec.kind in ("int", "float")]
# The 0..1 fractions (shadow_refine_rate is a fraction of at most 0.05: tested on its own).
FLOAT_FIELDS = [
    spec.path
    for spec in CELL_FIELDS
    if spec.kind == "float" and "weights" not in spec.path and spec.maximum == 1.0
]
WHOLE_NUMBER_FIELDS = [spec.path for spec in CELL_FIELDS if spec.kind == "int"]
POSITIVE_FIELDS = ["length_norm_tokens", "latency_budget_ms", "cloud_timeout_ms"]
NOT_NUMBERS = [
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="+inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param(True, id="true"),
    pytest.param(False, id="false"),
    pytest.param("0.5", id="string"),
    pytest.param(None, id="none"),
]


def _cell(**overrides: Any) -> dict[str, Any]:
    """A valid cell (the seed's auto cell) with some fields replaced, keyed by document path."""
    values = dict(DEFAULT_CELL_VALUES)
    for path, value in overrides.items():
        values[path.replace("__", ".")] = value
    return values


def _where(problems: list[Problem]) -> set[tuple[str | None, str]]:
    return {(p.cell, p.field) for p in problems}


def _demo_document() -> dict[str, Any]:
    return build_document(
        fleet_slug="fleet-a",
        number=None,
        published_at=None,
        dimensions={k: list(v) for k, v in SEED_DIMENSIONS.items()},
        table=demo_table(),
    )


# --- one cell: numbers ---------------------------------------------------------------------


@settings(max_examples=200)
@given(theta=st.floats(min_value=0.0, max_value=1.0))
def test_validate_cell__threshold_in_unit_interval__accepted_unchanged(theta: float) -> None:
    # Given a cell whose θ lies in [0, 1]
    values = _cell(threshold=theta)

    # When it is validated
    cleaned, problems = validate_cell(NORMAL, values)

    # Then it is accepted with θ exactly as given
    assert problems == []
    assert cleaned["threshold"] == theta


@settings(max_examples=200)
@given(
    field=st.sampled_from(FLOAT_FIELDS),
    value=st.floats(min_value=1.0, exclude_min=True, allow_infinity=False)
    | st.floats(max_value=0.0, exclude_max=True, allow_infinity=False),
)
def test_validate_cell__fraction_outside_unit_interval__refused_never_clamped(
    field: str, value: float
) -> None:
    # Given a cell with θ (or another 0..1 field) just or far outside [0, 1]
    values = _cell(**{field: value})

    # When it is validated
    cleaned, problems = validate_cell(NORMAL, values)

    # Then exactly that field of that cell is refused, with the range, and no value is kept
    assert _where(problems) == {("text/interactive/normal", field)}
    assert "[0, 1]" in problems[0].message
    assert field not in cleaned


@settings(max_examples=200)
@given(
    raw=st.tuples(*[st.floats(min_value=0.0, max_value=1e6) for _ in WEIGHT_PATHS]).filter(
        lambda t: sum(t) > 1e-3
    )
)
def test_validate_cell__non_negative_weights_summing_to_one__accepted(
    raw: tuple[float, float, float],
) -> None:
    # Given three non-negative weights scaled to sum to 1
    total = sum(raw)
    weights = {path: part / total for path, part in zip(WEIGHT_PATHS, raw, strict=True)}

    # When the cell is validated
    cleaned, problems = validate_cell(NORMAL, {**_cell(), **weights})

    # Then the weights are accepted as they are
    assert problems == []
    assert [cleaned[p] for p in WEIGHT_PATHS] == [weights[p] for p in WEIGHT_PATHS]


@settings(max_examples=200)
@given(
    weights=st.tuples(*[st.floats(min_value=0.0, max_value=1.0) for _ in WEIGHT_PATHS]).filter(
        lambda t: abs(sum(t) - 1.0) > 1.1e-6
    )
)
def test_validate_cell__weights_not_summing_to_one__refused_naming_weights(
    weights: tuple[float, float, float],
) -> None:
    # Given weights in [0, 1] whose sum is off 1 by more than the tolerance
    values = {**_cell(), **dict(zip(WEIGHT_PATHS, weights, strict=True))}

    # When the cell is validated
    _, problems = validate_cell(NORMAL, values)

    # Then the cell is refused on its field "weights", saying they must sum to 1
    assert _where(problems) == {("text/interactive/normal", "weights")}
    assert "sum to 1" in problems[0].message


@pytest.mark.parametrize("offset", [0.0, 0.9e-6, -0.9e-6])
def test_validate_cell__weight_sum_within_tolerance__accepted(offset: float) -> None:
    # Given weights whose sum is 1 within 1e-6
    values = _cell(weights__length=0.4 + offset, weights__intent=0.3, weights__lm=0.3)

    # When / Then they are accepted
    assert validate_cell(NORMAL, values)[1] == []


@settings(max_examples=100)
@given(
    path=st.sampled_from(WEIGHT_PATHS),
    negative=st.floats(max_value=0.0, exclude_max=True, allow_infinity=False),
)
def test_validate_cell__negative_weight__refused_naming_that_weight(
    path: str, negative: float
) -> None:
    # Given a cell with one negative weight
    values = {**_cell(), path: negative}

    # When it is validated
    _, problems = validate_cell(NORMAL, values)

    # Then that weight is named (the sum is not the complaint of a value that is itself wrong)
    assert ("text/interactive/normal", path) in _where(problems)


@settings(max_examples=150)
@given(field=st.sampled_from(POSITIVE_FIELDS), value=st.integers(min_value=1, max_value=600_000))
def test_validate_cell__positive_budget_or_timeout__accepted(field: str, value: int) -> None:
    # Given a positive token norm, latency budget or cloud timeout
    values = _cell(**{field: value})

    # When the cell is validated
    cleaned, problems = validate_cell(NORMAL, values)

    # Then it is accepted as given
    assert problems == []
    assert cleaned[field] == value


@settings(max_examples=150)
@given(field=st.sampled_from(POSITIVE_FIELDS), value=st.integers(max_value=0))
def test_validate_cell__zero_or_negative_budget_or_timeout__refused(field: str, value: int) -> None:
    # Given a zero or negative token norm, latency budget or cloud timeout
    values = _cell(**{field: value})

    # When the cell is validated
    cleaned, problems = validate_cell(NORMAL, values)

    # Then that field is refused and nothing is kept for it
    assert _where(problems) == {("text/interactive/normal", field)}
    assert field not in cleaned


@pytest.mark.parametrize("bad", NOT_NUMBERS)
@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_validate_cell__numeric_field_given_non_number__refused_naming_field(
    field: str, bad: Any
) -> None:
    # Given a numeric field holding NaN, an infinity, a boolean, a string or null
    values = _cell(**{field: bad})

    # When the cell is validated
    cleaned, problems = validate_cell(NORMAL, values)

    # Then exactly that field is refused, the message shows the value, and nothing is clamped
    assert ("text/interactive/normal", field) in _where(problems)
    field_problem = next(p for p in problems if p.field == field)
    assert repr(bad) in field_problem.message
    assert field not in cleaned


@pytest.mark.parametrize("field", WHOLE_NUMBER_FIELDS)
def test_validate_cell__whole_number_field_given_fraction__refused(field: str) -> None:
    # Given a whole-number field (tokens, ms, bytes, seconds) holding 1.5
    values = _cell(**{field: 1.5})

    # When the cell is validated
    cleaned, problems = validate_cell(NORMAL, values)

    # Then it is refused as not a whole number
    assert _where(problems) == {("text/interactive/normal", field)}
    assert "whole number" in problems[0].message
    assert field not in cleaned


def test_validate_cell__whole_number_written_as_float__accepted_as_int() -> None:
    # Given a token norm written as 400.0 (as some JSON encoders do)
    values = _cell(length_norm_tokens=400.0)

    # When the cell is validated
    cleaned, problems = validate_cell(NORMAL, values)

    # Then it is accepted as the integer 400
    assert problems == []
    assert cleaned["length_norm_tokens"] == 400
    assert isinstance(cleaned["length_norm_tokens"], int)


# --- one cell: other fields ----------------------------------------------------------------


@pytest.mark.parametrize("bad", ["false", 0, None])
def test_validate_cell__upload_allowed_not_a_boolean__refused(bad: Any) -> None:
    # Given upload.allowed written as a string, a number or null (a string "false" is truthy)
    values = _cell(upload__allowed=bad)

    # When the cell is validated
    _, problems = validate_cell(SENSITIVE, values)

    # Then the field is refused rather than read as true or false
    assert ("text/interactive/sensitive", "upload.allowed") in _where(problems)


def test_validate_cell__unknown_mode__refused_listing_modes() -> None:
    # Given a mode that does not exist
    values = _cell(mode="turbo")

    # When the cell is validated
    _, problems = validate_cell(NORMAL, values)

    # Then the message lists the modes a user can choose
    assert _where(problems) == {("text/interactive/normal", "mode")}
    assert "device_only, cloud_only, auto, draft_refine" in problems[0].message


def test_validate_cell__unknown_and_missing_fields__each_named() -> None:
    # Given a cell without a threshold and with a misspelt field
    values = _cell(treshold=0.5)
    del values["threshold"]

    # When it is validated
    _, problems = validate_cell(NORMAL, values)

    # Then both are named
    assert _where(problems) == {
        ("text/interactive/normal", "treshold"),
        ("text/interactive/normal", "threshold"),
    }


def test_validate_cell__cloud_only_on_sensitive_tier_without_uploads__refused_on_mode() -> None:
    # Given a sensitive cell that must go to the cloud but may not upload anything
    values = _cell(mode="cloud_only", upload__allowed=False)

    # When it is validated
    _, problems = validate_cell(SENSITIVE, values)

    # Then the contradiction is reported on "mode"
    assert _where(problems) == {("text/interactive/sensitive", "mode")}
    assert "cloud_only" in problems[0].message


@pytest.mark.parametrize(
    ("key", "upload_allowed"),
    [
        pytest.param(NORMAL, False, id="normal-tier-no-uploads"),
        pytest.param(SENSITIVE, True, id="sensitive-tier-uploads-allowed"),
    ],
)
def test_validate_cell__cloud_only_without_the_contradiction__accepted(
    key: CellKey, upload_allowed: bool
) -> None:
    # Given cloud_only on a normal tier, or on a sensitive tier that may upload
    values = _cell(mode="cloud_only", upload__allowed=upload_allowed)

    # When / Then it is accepted
    assert validate_cell(key, values)[1] == []


# --- dimensions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["Code", "1code", "co de", "", "code\n", "c" * 33, "café", 7, None],
)
def test_validate_dimensions__value_not_a_slug__refused_naming_dimension(bad: Any) -> None:
    # Given task types that include a value that is not a lowercase slug
    dimensions = {**SEED_DIMENSIONS, "task_type": ["voice", bad]}

    # When they are validated
    problems = validate_dimensions(dimensions)

    # Then the dimension is named and the value shown
    assert _where(problems) == {(None, "dimensions.task_type")}
    assert repr(bad) in problems[0].message


def test_validate_dimensions__repeated_value__refused() -> None:
    # Given a privacy tier listed twice
    dimensions = {**SEED_DIMENSIONS, "privacy_tier": ["sensitive", "normal", "normal"]}

    # When they are validated
    problems = validate_dimensions(dimensions)

    # Then the repeat is named
    assert _where(problems) == {(None, "dimensions.privacy_tier")}
    assert "'normal' appears twice" in problems[0].message


def test_validate_dimensions__slugs_with_digits_dash_underscore__accepted() -> None:
    # Given values such as on-device, code_2 and a 32-character slug
    dimensions = {**SEED_DIMENSIONS, "task_type": ["on-device", "code_2", "c" * 32]}

    # When / Then they are accepted
    assert validate_dimensions(dimensions) == []


def test_validate_dimensions__missing_or_unknown_dimension__named() -> None:
    # Given dimensions without privacy_tier and with an extra one
    dimensions = {
        "task_type": ["voice"],
        "latency_budget": ["interactive"],
        "region": ["eu"],
    }

    # When they are validated
    problems = validate_dimensions(dimensions)

    # Then both are named
    assert _where(problems) == {(None, "dimensions.privacy_tier"), (None, "dimensions.region")}


# --- whole tables ----------------------------------------------------------------------------


def test_validate_coverage__missing_combination__refused_naming_cell() -> None:
    # Given the seed dimensions and a table lacking one of the 12 combinations
    keys = [k for k in ordered_keys(SEED_DIMENSIONS) if k != ("image", "background", "normal")]

    # When its coverage is checked
    problems = validate_coverage(SEED_DIMENSIONS, keys)

    # Then the missing cell is named
    assert _where(problems) == {("image/background/normal", "cell")}
    assert "missing" in problems[0].message


def test_validate_coverage__duplicate_combination__refused_naming_cell() -> None:
    # Given a table with one combination twice
    keys = [*ordered_keys(SEED_DIMENSIONS), ("voice", "interactive", "normal")]

    # When its coverage is checked
    problems = validate_coverage(SEED_DIMENSIONS, keys)

    # Then the repeated cell is named
    assert _where(problems) == {("voice/interactive/normal", "cell")}
    assert "more than once" in problems[0].message


def test_validate_coverage__value_not_in_dimensions__refused_naming_cell_and_dimension() -> None:
    # Given a table with a cell for task type `code` that the dimensions do not list
    keys = [*ordered_keys(SEED_DIMENSIONS), ("code", "interactive", "normal")]

    # When its coverage is checked
    problems = validate_coverage(SEED_DIMENSIONS, keys)

    # Then the cell and the dimension are named
    assert _where(problems) == {("code/interactive/normal", "task_type")}
    assert "'code' is not a value of task_type" in problems[0].message


def test_document_input__demo_document__gives_its_table() -> None:
    # Given the demo's policy document
    document = _demo_document()

    # When it is read as an import (its fields by the import's serializer, the whole table by
    # the checks the import service asks)
    checked = document_input(document, with_revision=False)
    cells = [document_cell(cell) for cell in checked["cells"]]

    # Then it reads back exactly as the demo's 12-cell table
    assert table_problems(checked["dimensions"], cells) == []
    assert checked["dimensions"] == SEED_DIMENSIONS
    assert dict(cells) == demo_table()


def test_document_input__several_bad_cells__each_cell_and_field_named() -> None:
    # Given a document with a NaN threshold in one cell, weights off in another, and a duplicate
    document = _demo_document()
    document["cells"][0]["threshold"] = math.nan
    document["cells"][5]["weights"]["lm"] = 0.9
    document["cells"].append(dict(document["cells"][2]))

    # When it is read
    with pytest.raises(ValidationFailed) as refused:
        document_input(document, with_revision=False)

    # Then every problem names its cell and field
    labels = ["/".join(ordered_keys(SEED_DIMENSIONS)[i]) for i in (0, 5, 2)]
    assert {(d.get("cell"), d["field"]) for d in refused.value.details} == {
        (labels[0], "threshold"),
        (labels[1], "weights"),
        (labels[2], "cell"),
    }


@pytest.mark.parametrize(
    "document",
    [[], "policy", None, {"dimensions": SEED_DIMENSIONS, "cells": []}],
    ids=["list", "string", "null", "no-cells"],
)
def test_document_input__not_a_document__refused(document: Any) -> None:
    # Given something that is not a policy document
    # When it is read / Then it is refused, naming what is wrong, and yields no table
    with pytest.raises(ValidationFailed) as refused:
        document_input(document, with_revision=False)
    assert refused.value.details
