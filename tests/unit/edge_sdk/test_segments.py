"""Device attributes and segment rules (edge_sdk.segments): the one evaluation the server and
the SDK share, its laws, its bounds, and the order of versions."""

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import routing_policies.segments.rules as server_rules
from edge_sdk import segments
from edge_sdk.segments import (
    ATTRIBUTES,
    MAX_IN_VALUES,
    MAX_RULE_DEPTH,
    MAX_RULE_NODES,
    REPORTED_ATTRIBUTES,
    AttributeProblem,
    RuleProblem,
    attributes_parse,
    device_attributes,
    rule_check,
    rule_matches,
    segments_of,
    version_key,
)

# Small pools of values, so that random devices and random rules meet often.
POOLS: dict[str, list[Any]] = {
    "platform": ["android", "ios", "android-automotive"],
    "os_version": ["10", "12", "13.1", "14", "14.0.1", "15-beta.1", "15"],
    "app_version": ["4.10.2", "4.11.0", "4.12.0-rc.1", "4.12.0", "4.12.1+build.7"],
    "model": ["Pixel 8", "Galaxy A15", "Head unit SA8155"],
    "accelerator": ["npu", "gpu", "cpu"],
    "memory_gb": [2, 4, 6, 8, 12.5, 16],
    "local_model": ["qwen2.5-0.5b", "qwen2.5-1.5b", "llama3.2-1b"],
    "quantisation": ["int4", "int8", "fp16"],
    "region": ["eu-west", "us-east", "ap-south"],
}
ORDERED = [name for name, a in ATTRIBUTES.items() if a.kind in ("number", "version")]


def _distinct(name: str, values: list[Any]) -> list[Any]:
    """`values` less those equal to an earlier one as the attribute compares them."""
    seen, kept = set(), []
    for value in values:
        key = version_key(value) if ATTRIBUTES[name].kind == "version" else value
        if key not in seen:
            seen.add(key)
            kept.append(value)
    return kept


@st.composite
def conditions(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(POOLS)))
    pool = POOLS[name]
    operator = draw(
        st.sampled_from(["equals", "in", "range"] if name in ORDERED else ["equals", "in"])
    )
    if operator == "equals":
        return {"attribute": name, "equals": draw(st.sampled_from(pool))}
    if operator == "in":
        values = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4))
        return {"attribute": name, "in": _distinct(name, values)}
    low, high = sorted(
        draw(st.lists(st.sampled_from(pool), min_size=2, max_size=2, unique=True)),
        key=lambda v: version_key(v) if name != "memory_gb" else v,
    )
    lower = draw(st.sampled_from([None, "gt", "gte"]))
    upper = draw(st.sampled_from([None, "lt", "lte"] if lower else ["lt", "lte"]))
    bounds = {k: v for k, v in ((lower, low), (upper, high)) if k}
    if lower == "gt" and upper == "lt" and _key(name, low) == _key(name, high):
        bounds = {"gte": low}
    return {"attribute": name, "range": bounds}


def _key(name: str, value: Any) -> Any:
    return version_key(value) if ATTRIBUTES[name].kind == "version" else value


rules = st.recursive(
    conditions(),
    lambda children: st.one_of(
        st.builds(lambda c: {"all_of": c}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda c: {"any_of": c}, st.lists(children, min_size=1, max_size=3)),
    ),
    max_leaves=8,
)
attribute_sets = st.dictionaries(
    st.sampled_from(sorted(POOLS)), st.none(), max_size=len(POOLS)
).flatmap(
    lambda chosen: st.fixed_dictionaries({name: st.sampled_from(POOLS[name]) for name in chosen})
)


def _checked(rule: dict[str, Any]) -> dict[str, Any]:
    rule_check(rule)  # the generator makes valid rules only (nesting is at most 3 deep here)
    return rule


# --- one function, on the server and the device ---------------------------------------------------


def test_rule_matches__server__is_the_sdks_function() -> None:
    # Given / When the server's evaluation and checks are looked up
    # Then they are the SDK's own objects: nothing to keep in step
    assert server_rules.rule_matches is segments.rule_matches
    assert server_rules.rule_check is segments.rule_check
    assert server_rules.attributes_parse is segments.attributes_parse
    assert server_rules.ATTRIBUTES is segments.ATTRIBUTES


@settings(max_examples=300, deadline=None)
@given(rule=rules, attributes=attribute_sets)
def test_rule_matches__random_rule_and_device__server_and_sdk_agree(
    rule: dict[str, Any], attributes: dict[str, Any]
) -> None:
    # Given a random valid rule and a random device (some attributes unknown)
    _checked(rule)
    # When the server (its re-export, on the stored view of the device) and the SDK (on what
    # it was configured with) evaluate it
    reported = {k: v for k, v in attributes.items() if k in REPORTED_ATTRIBUTES}
    stored = server_rules.device_attributes(
        platform=attributes.get("platform", ""),
        model=attributes.get("model", ""),
        reported=server_rules.attributes_parse(reported),
    )
    # Then they agree
    assert server_rules.rule_matches(rule, stored) == rule_matches(rule, attributes)


# --- laws ----------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(a=rules, b=rules, attributes=attribute_sets)
def test_groups__random_rules__all_of_is_and_any_of_is_or(
    a: dict[str, Any], b: dict[str, Any], attributes: dict[str, Any]
) -> None:
    # Given two rules and a device
    ma, mb = rule_matches(a, attributes), rule_matches(b, attributes)
    # Then the groups are the logic they name, in any order, and a group of one is its rule
    assert rule_matches({"all_of": [a, b]}, attributes) == (ma and mb)
    assert rule_matches({"all_of": [b, a]}, attributes) == (ma and mb)
    assert rule_matches({"any_of": [a, b]}, attributes) == (ma or mb)
    assert rule_matches({"any_of": [b, a]}, attributes) == (ma or mb)
    assert rule_matches({"all_of": [a]}, attributes) == ma
    assert rule_matches({"any_of": [a]}, attributes) == ma
    # absorption
    assert rule_matches({"any_of": [a, {"all_of": [a, b]}]}, attributes) == ma
    assert rule_matches({"all_of": [a, {"any_of": [a, b]}]}, attributes) == ma


@settings(max_examples=300, deadline=None)
@given(rule=rules, attributes=attribute_sets, data=st.data())
def test_unknown__random_rule__never_matches_and_knowing_more_never_unmatches(
    rule: dict[str, Any], attributes: dict[str, Any], data: st.DataObject
) -> None:
    # Given a rule (every rule is positive: no negation exists)
    # Then a device that reported nothing is in no segment
    assert rule_matches(rule, {}) is False
    assert rule_matches(rule, dict.fromkeys(ATTRIBUTES)) is False
    # and a device that knows fewer attributes matches only if the one that knows more does
    known = data.draw(st.sets(st.sampled_from(sorted(attributes) or ["region"])))
    fewer = {k: v for k, v in attributes.items() if k in known}
    if rule_matches(rule, fewer):
        assert rule_matches(rule, attributes)


def test_unknown__attribute_missing__no_condition_on_it_matches() -> None:
    # Given a device that did not say which accelerator it has
    device = {"platform": "android", "memory_gb": 8}
    # Then neither "is npu" nor "is one of everything" nor a range on another unknown matches
    assert not rule_matches({"attribute": "accelerator", "equals": "npu"}, device)
    assert not rule_matches({"attribute": "accelerator", "in": ["npu", "gpu", "cpu"]}, device)
    assert not rule_matches({"attribute": "os_version", "range": {"gte": "0"}}, device)
    # while what it did say is read
    assert rule_matches({"attribute": "memory_gb", "range": {"gte": 8}}, device)


# --- versions -------------------------------------------------------------------------------------

SEMVER_PRECEDENCE = [  # semver.org, item 11
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.2",
    "1.10.0",
    "2",
    "14.0.1",
]


def test_version_key__semver_precedence__in_that_order() -> None:
    # Given the precedence list of the semantic-versioning spec (and shorter OS versions)
    keys = [version_key(v) for v in SEMVER_PRECEDENCE]
    # Then each comes strictly before the next
    assert all(a < b for a, b in itertools.pairwise(keys)), keys  # type: ignore[operator]


@pytest.mark.parametrize(
    ("a", "b"), [("14", "14.0.0"), ("14.0", "14.0.0.0"), ("1.2.3+build.1", "1.2.3")]
)
def test_version_key__same_version_written_twice__equal(a: str, b: str) -> None:
    # Given / When / Then missing numbers count as 0 and build metadata is ignored
    assert version_key(a) == version_key(b)


@settings(max_examples=300)
@given(
    a=st.tuples(*[st.integers(0, 10**6)] * 3),
    b=st.tuples(*[st.integers(0, 10**6)] * 3),
)
def test_version_range__random_versions__ordered_as_their_numbers(
    a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    # Given two versions
    va, vb = ".".join(map(str, a)), ".".join(map(str, b))
    # When a device on `a` is checked against "from `b`" and "below `b`"
    device = {"app_version": va}
    at_least = rule_matches({"attribute": "app_version", "range": {"gte": vb}}, device)
    below = rule_matches({"attribute": "app_version", "range": {"lt": vb}}, device)
    # Then the answer is the order of the numbers, never of the text ("10" after "9")
    assert at_least == (a >= b)
    assert below == (a < b)


# --- what a rule may be ---------------------------------------------------------------------------


def _deep(levels: int) -> dict[str, Any]:
    rule: dict[str, Any] = {"attribute": "accelerator", "equals": "npu"}
    for _ in range(levels):
        rule = {"all_of": [rule]}
    return rule


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ([], ""),
        ({"attribute": "colour", "equals": "red"}, "attribute"),
        ({"attribute": "accelerator", "equals": "tpu"}, "equals"),
        ({"attribute": "accelerator", "equals": "npu", "in": ["npu"]}, ""),
        ({"attribute": "accelerator"}, ""),
        ({"attribute": "accelerator", "equals": "npu", "not": True}, "not"),
        ({"attribute": "region", "equals": "x" * 33}, "equals"),
        ({"attribute": "region", "equals": "eu\x00west"}, "equals"),
        ({"attribute": "region", "equals": ""}, "equals"),
        ({"attribute": "model", "equals": " Pixel 8"}, "equals"),
        ({"attribute": "memory_gb", "equals": True}, "equals"),
        ({"attribute": "memory_gb", "equals": "8"}, "equals"),
        ({"attribute": "memory_gb", "range": {"gte": 2000}}, "range.gte"),
        ({"attribute": "memory_gb", "range": {"gte": float("nan")}}, "range.gte"),
        ({"attribute": "memory_gb", "range": {"gte": 10**400}}, "range.gte"),
        ({"attribute": "memory_gb", "range": {}}, "range"),
        ({"attribute": "memory_gb", "range": {"above": 3}}, "range.above"),
        ({"attribute": "memory_gb", "range": {"gt": 3, "gte": 4}}, "range"),
        ({"attribute": "memory_gb", "range": {"gte": 8, "lt": 4}}, "range"),
        ({"attribute": "memory_gb", "range": {"gt": 8, "lte": 8}}, "range"),
        ({"attribute": "os_version", "range": {"gte": "15", "lt": "14.9"}}, "range"),
        ({"attribute": "os_version", "range": {"gte": "fourteen"}}, "range.gte"),
        ({"attribute": "region", "range": {"gte": "a"}}, "range"),
        ({"attribute": "region", "in": []}, "in"),
        ({"attribute": "region", "in": "eu-west"}, "in"),
        ({"attribute": "region", "in": ["eu-west", "eu-west"]}, "in[1]"),
        ({"attribute": "os_version", "in": ["14", "14.0"]}, "in[1]"),
        ({"attribute": "region", "in": [f"r{i}" for i in range(MAX_IN_VALUES + 1)]}, "in"),
        ({"all_of": []}, "all_of"),
        ({"any_of": [{"attribute": "region", "equals": "Bad"}]}, "any_of[0].equals"),
        ({"all_of": [{"attribute": "accelerator", "equals": "npu"}], "x": 1}, "x"),
        (_deep(MAX_RULE_DEPTH + 1), "all_of[0].all_of[0].all_of[0].all_of[0].all_of"),
        (
            {
                "any_of": [
                    {"any_of": [{"attribute": "memory_gb", "equals": i}] * 31} for i in range(3)
                ]
            },
            "",
        ),
    ],
)
def test_rule_check__invalid_rule__refused_naming_where(rule: Any, field: str) -> None:
    # Given / When a rule that is not one is checked
    with pytest.raises(RuleProblem) as refused:
        rule_check(rule)
    # Then the refusal names the place inside the rule
    assert refused.value.field == field, refused.value


def test_rule_check__bounds__deepest_and_largest_allowed_pass() -> None:
    # Given the deepest nesting and a rule of the most nodes allowed
    leaf = {"attribute": "memory_gb", "equals": 8}
    largest = {"any_of": [{"any_of": [leaf] * 31}, {"any_of": [leaf] * 30}]}
    assert MAX_RULE_NODES == 1 + 32 + 31
    # When / Then both are rules
    rule_check(_deep(MAX_RULE_DEPTH))
    rule_check(largest)


# --- what a device reports ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], ""),
        ({"colour": "red"}, "colour"),
        ({"platform": "android"}, "platform"),  # hello's own field, not an attribute
        ({"accelerator": "NPU"}, "accelerator"),
        ({"memory_gb": -1}, "memory_gb"),
        ({"memory_gb": 10**400}, "memory_gb"),
        ({"memory_gb": "8"}, "memory_gb"),
        ({"memory_gb": False}, "memory_gb"),
        ({"os_version": "14;drop"}, "os_version"),
        ({"app_version": "1." * 20 + "1"}, "app_version"),
        ({"local_model": "Qwen 2.5"}, "local_model"),
        ({"region": "eu\x00"}, "region"),
        ({"quantisation": "int4" * 5}, "quantisation"),
    ],
)
def test_attributes_parse__bad_report__refused_naming_it(raw: Any, field: str) -> None:
    # Given / When / Then an attribute that is not one is refused by name
    with pytest.raises(AttributeProblem) as refused:
        attributes_parse(raw)
    assert refused.value.field == field


def test_attributes_parse__null_and_missing__unknown_never_guessed() -> None:
    # Given a report with a null and without most attributes
    parsed = attributes_parse({"accelerator": "npu", "region": None, "memory_gb": 7.5})
    # Then only what was said is kept, and nothing is filled in
    assert parsed == {"accelerator": "npu", "memory_gb": 7.5}
    view = device_attributes(platform="", model="Pixel 8", reported=parsed)
    assert view == {"model": "Pixel 8", "accelerator": "npu", "memory_gb": 7.5}


def test_segments_of__device__names_its_segments_in_order() -> None:
    # Given three segments and an NPU phone on Android 14
    named = {
        "npu": {"attribute": "accelerator", "equals": "npu"},
        "cars": {"attribute": "platform", "equals": "android-automotive"},
        "modern": {"attribute": "os_version", "range": {"gte": "14"}},
    }
    phone = {"platform": "android", "accelerator": "npu", "os_version": "14.0.1"}
    # When / Then it is in two of them
    assert segments_of(named, phone) == ["npu", "modern"]
