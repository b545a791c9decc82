"""The fields of a policy cell (PROTOCOL.md), described once.

Validation, the policy document, the diff, the editor form and the model all read this table,
so a field is added in one place. `path` is the field's dotted path in the policy document;
`attr` is the model column.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

FieldKind = Literal["choice", "float", "int", "bool"]

DIMENSIONS: tuple[str, ...] = ("task_type", "latency_budget", "privacy_tier")
DIMENSION_LABELS = {
    "task_type": "Task type",
    "latency_budget": "Latency budget",
    "privacy_tier": "Privacy tier",
}
SEED_DIMENSIONS: dict[str, list[str]] = {
    "task_type": ["voice", "text", "image"],
    "latency_budget": ["interactive", "background"],
    "privacy_tier": ["sensitive", "normal"],
}
SENSITIVE_TIER = "sensitive"

MODES = ("device_only", "cloud_only", "auto", "draft_refine")
FALLBACKS = ("other_side", "none")
WEIGHT_PATHS = ("weights.length", "weights.intent", "weights.lm")
WEIGHT_SUM_TOLERANCE = 1e-6
# PROTOCOL.md extensions: at most 5% of device-answered tasks are also refined by the cloud.
MAX_SHADOW_REFINE_RATE = 0.05


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One cell field: where it sits in the document, its column, its type and its range."""

    path: str
    attr: str
    kind: FieldKind
    label: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    minimum_exclusive: bool = False
    choices: tuple[str, ...] = ()
    help: str = ""
    # An optional field: a cell without it (a document written before the field existed) has
    # this value, and the policy document leaves it out while it has it, so the documents of
    # versions published before the field existed stay byte for byte what devices received.
    default: Any = None

    @property
    def optional(self) -> bool:
        """Whether a cell may leave the field out (it then has `default`)."""
        return self.default is not None


CELL_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(
        "mode",
        "mode",
        "choice",
        "Mode",
        choices=MODES,
        help="device_only / cloud_only pin the route; auto scores the task against θ; "
        "draft_refine drafts on the device and refines in the cloud.",
    ),
    FieldSpec(
        "threshold",
        "threshold",
        "float",
        "Threshold θ",
        minimum=0.0,
        maximum=1.0,
        help="Tasks scoring below θ stay on the device.",
    ),
    FieldSpec(
        "weights.length", "weight_length", "float", "Weight: length", minimum=0.0, maximum=1.0
    ),
    FieldSpec(
        "weights.intent", "weight_intent", "float", "Weight: intent", minimum=0.0, maximum=1.0
    ),
    FieldSpec("weights.lm", "weight_lm", "float", "Weight: LM", minimum=0.0, maximum=1.0),
    FieldSpec(
        "length_norm_tokens",
        "length_norm_tokens",
        "int",
        "Length norm",
        unit="tokens",
        minimum=1,
        maximum=1_000_000,
    ),
    FieldSpec(
        "latency_budget_ms",
        "latency_budget_ms",
        "int",
        "Latency budget",
        unit="ms",
        minimum=1,
        maximum=600_000,
    ),
    FieldSpec(
        "cloud_timeout_ms",
        "cloud_timeout_ms",
        "int",
        "Cloud timeout",
        unit="ms",
        minimum=1,
        maximum=600_000,
    ),
    FieldSpec("fallback", "fallback", "choice", "Fallback", choices=FALLBACKS),
    FieldSpec("upload.allowed", "upload_allowed", "bool", "Upload allowed"),
    FieldSpec("upload.deidentify", "upload_deidentify", "bool", "De-identify uploads"),
    FieldSpec(
        "upload.max_bytes",
        "upload_max_bytes",
        "int",
        "Upload max",
        unit="bytes",
        minimum=0,
        maximum=100 * 1024 * 1024,
    ),
    FieldSpec(
        "network.rtt_high_ms",
        "rtt_high_ms",
        "int",
        "High RTT",
        unit="ms",
        minimum=1,
        maximum=60_000,
    ),
    FieldSpec(
        "network.bandwidth_low_kbps",
        "bandwidth_low_kbps",
        "int",
        "Low bandwidth",
        unit="kbps",
        minimum=1,
        maximum=10_000_000,
    ),
    FieldSpec(
        "network.theta_raise",
        "theta_raise",
        "float",
        "θ raise on weak network",
        minimum=0.0,
        maximum=1.0,
    ),
    FieldSpec("load.busy", "load_busy", "float", "Busy load", minimum=0.0, maximum=1.0),
    FieldSpec(
        "load.theta_lower", "theta_lower", "float", "θ lower when busy", minimum=0.0, maximum=1.0
    ),
    FieldSpec(
        "cache_ttl_s", "cache_ttl_s", "int", "Cache TTL", unit="s", minimum=0, maximum=30 * 86_400
    ),
    FieldSpec(
        "shadow_refine_rate",
        "shadow_refine_rate",
        "float",
        "Shadow refine rate",
        minimum=0.0,
        maximum=MAX_SHADOW_REFINE_RATE,
        help="Share of tasks answered on the device that the cloud also refines in the "
        "background, to measure the device's quality below θ; 0 where uploads are not allowed.",
        default=0.0,
    ),
)
FIELDS_BY_PATH: dict[str, FieldSpec] = {spec.path: spec for spec in CELL_FIELDS}
FIELD_PATHS: tuple[str, ...] = tuple(spec.path for spec in CELL_FIELDS)

CellKey = tuple[str, str, str]


def cell_key_label(key: CellKey) -> str:
    """`voice/interactive/sensitive`: how a cell is named in errors, diffs and the audit log."""
    return "/".join(key)


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Turn `{"weights.length": 0.4}` into `{"weights": {"length": 0.4}}`."""
    nested: dict[str, Any] = {}
    for path, value in flat.items():
        head, _, tail = path.partition(".")
        if tail:
            nested.setdefault(head, {})[tail] = value
        else:
            nested[head] = value
    return nested


def flatten(nested: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `nest`, one level deep (the document nests no deeper)."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, dict) and any(p.startswith(f"{key}.") for p in FIELD_PATHS):
            for sub, sub_value in value.items():
                flat[f"{key}.{sub}"] = sub_value
        else:
            flat[key] = value
    return flat


def document_cell(cell: Mapping[str, Any]) -> tuple[CellKey, dict[str, Any]]:
    """A cell of a policy document (its fields checked) as a table holds it: its key, and its
    values by document path, in the order of CELL_FIELDS, an optional field left out given its
    default."""
    key: CellKey = (cell["task_type"], cell["latency_budget"], cell["privacy_tier"])
    flat = flatten({name: value for name, value in cell.items() if name not in DIMENSIONS})
    values = {
        spec.path: flat.get(spec.path, spec.default)
        for spec in CELL_FIELDS
        if spec.path in flat or spec.optional
    }
    return key, values


# Defaults for a brand-new cell: the seed's auto cell (θ 0.6, weights 0.4/0.3/0.3 over 400 tokens).
DEFAULT_CELL_VALUES: dict[str, Any] = {
    "mode": "auto",
    "threshold": 0.6,
    "weights.length": 0.4,
    "weights.intent": 0.3,
    "weights.lm": 0.3,
    "length_norm_tokens": 400,
    "latency_budget_ms": 1500,
    "cloud_timeout_ms": 2000,
    "fallback": "other_side",
    "upload.allowed": True,
    "upload.deidentify": True,
    "upload.max_bytes": 262_144,
    "network.rtt_high_ms": 200,
    "network.bandwidth_low_kbps": 500,
    "network.theta_raise": 0.15,
    "load.busy": 0.8,
    "load.theta_lower": 0.1,
    "cache_ttl_s": 3600,
    "shadow_refine_rate": 0.0,
}
