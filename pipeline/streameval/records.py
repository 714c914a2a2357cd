"""Every message streameval reads or writes, as msgspec types: the one definition of its format.

The JSON Schemas in ``topics/schemas/`` are generated from these types
(:mod:`streameval.schema_files`). What the types cannot say — per-class measure names, the
unit interval with its rounding slack — is declared next to them, in their
``extra_json_schema``.

Input messages have the fields of their topic and no others (unknown fields are refused by the
decoder and by the schemas alike). The Engine builds its output records as these types;
:func:`decode_record` reads a published one back as its type, and :func:`check_record` converts
a record decoded as plain JSON (a dict) into its type, naming where it differs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from streameval.core.cost import COST_MEASURES
from streameval.core.measures import SCALAR_MEASURES

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_TS",
    "MIN_TS",
    "SCHEMA_DEFS",
    "Cohort",
    "CohortClass",
    "ComparisonRecord",
    "DeadLetterHeaders",
    "DriftAlarmRecord",
    "FinalMetricsRecord",
    "InitialMetricsRecord",
    "InstanceMessage",
    "InstanceRecord",
    "LabelMaturityRecord",
    "LabelMessage",
    "LabelRecord",
    "Latency",
    "MetricsRecord",
    "PairMeasures",
    "PredictionMessage",
    "PredictionRecord",
    "Record",
    "check_record",
    "decode_record",
]

#: Event times are epoch milliseconds of a date from 1973-03-03 (10^11 ms) to 2200-01-01: in
#: any other unit (s, µs, ns) today's dates fall outside, so a unit error cannot pass for a date.
MIN_TS = 100_000_000_000
MAX_TS = 7_258_118_400_000
#: Largest input message accepted (bytes); larger ones are dead letters.
MAX_MESSAGE_BYTES = 1_048_576

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
Timestamp = Annotated[
    int,
    msgspec.Meta(
        ge=MIN_TS,
        le=MAX_TS,
        description="epoch milliseconds, 1973-03-03 to 2200-01-01 (another unit: [time] ts_unit)",
    ),
]
#: integer labels are 64-bit: they travel through msgpack and numpy
ClassLabel = (
    Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    | Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
)


# -- inputs -----------------------------------------------------------------------------------
#: an attribute's value: what a slice is named by (docs/measures.md, "Slices")
AttributeValue = Annotated[str, msgspec.Meta(max_length=512)] | int | float | bool | None


class InstanceRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An instance became available; its ts starts the latency period. Key: instance_id."""

    instance_id: Id
    ts: Timestamp
    features: dict[str, Any] | None = None
    attributes: (
        Annotated[
            dict[Annotated[str, msgspec.Meta(min_length=1, max_length=256)], AttributeValue],
            msgspec.Meta(
                max_length=256,
                description="what the instance is (a country, a device type, a model version): "
                "slices.by names one of them to evaluate every model per value",
            ),
        ]
        | None
    ) = None


#: A prediction's probability per class (the decoder also checks what a schema cannot say:
#: that they add up to 1, and that an integer label's classes are named by their digits).
Scores = Annotated[
    dict[
        Annotated[str, msgspec.Meta(min_length=1, max_length=512)],
        Annotated[float, msgspec.Meta(ge=0.0, le=1.0)],
    ],
    msgspec.Meta(
        min_length=1,
        max_length=1000,
        description="a probability per class, adding up to 1 within 1e-6 (checked by the "
        "decoder); the classes are named as the label names its class: an integer label's "
        'by their digits ({"0": 0.2, "1": 0.8})',
    ),
]


class PredictionRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A model's prediction for an instance; several per model and instance are its evolving
    predictions. Key: instance_id."""

    instance_id: Id
    model_id: Id
    ts: Timestamp
    label: ClassLabel
    scores: Scores | None = None
    model_version: str | None = None


class LabelRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The ground truth of an instance. Key: instance_id."""

    instance_id: Id
    ts: Timestamp
    label: ClassLabel


# A message may say its type, which must be its topic's (replay files, which merge the topics,
# need it); the decoder reads it leniently to name a mismatch (streameval.codec).
class InstanceMessage(InstanceRecord, frozen=True):
    __doc__ = InstanceRecord.__doc__
    type: Literal["instance"] | None = None


class PredictionMessage(PredictionRecord, frozen=True):
    __doc__ = PredictionRecord.__doc__
    type: Literal["prediction"] | None = None


class LabelMessage(LabelRecord, frozen=True):
    __doc__ = LabelRecord.__doc__
    type: Literal["label"] | None = None


# -- outputs ----------------------------------------------------------------------------------
_VALUE = {"anyOf": [{"type": "number"}, {"type": "null"}]}
#: a share, allowed its rounding slack
_UNIT = {"anyOf": [{"type": "null"}, {"type": "number", "minimum": -1e-9, "maximum": 1.000000001}]}
#: what ``$ref`` of the annotations below points to: a schema has those it uses in its ``$defs``
SCHEMA_DEFS = {"value": _VALUE, "unit": _UNIT}
_REF_VALUE, _REF_UNIT = {"$ref": "#/$defs/value"}, {"$ref": "#/$defs/unit"}
_SIGNED = (
    "kappa",
    "kappa_m",
    "kappa_temporal",
    "mcc",
    "kappa_se",
    "kappa_se0",
    "kappa_z",
    *(f"{name}_{end}" for name in ("kappa", "kappa_m", "kappa_temporal") for end in ("lo", "hi")),
)
_NORMALIZED = "accuracy|balanced_accuracy|kappa|g_mean|mcc|precision|recall|f1"
_COUNTS = {
    "n": {"type": "integer", "minimum": 0},
    "n_effective": {"type": "number", "minimum": 0},
    "n_kish": {"type": "number", "minimum": 0},
}
_WARMING_UP = {
    "type": "boolean",
    "description": "n_kish is below the configured min_n: too few outcomes to act on",
}

_NON_NEGATIVE = {"anyOf": [{"type": "null"}, {"type": "number", "minimum": 0}]}
_UNITS = {"type": "array", "items": _REF_UNIT}
#: the measures of a model's scores, once its view has a prediction with scores
#: (docs/measures.md, "Scores")
_PROBABILISTIC = {
    "n_scored": {"type": "integer", "minimum": 0, "description": "outcomes with scores covered"},
    "log_loss": _NON_NEGATIVE,
    "brier": {
        "anyOf": [{"type": "null"}, {"type": "number", "minimum": 0, "maximum": 2.000000001}]
    },
    "ece": _REF_UNIT,
    "roc_auc": _REF_UNIT,
    "roc_auc_grid": {
        "type": "number",
        "minimum": 0,
        "description": "step of the grid the all-history AUC rounds scores to (0: exact)",
    },
    "reliability": {
        "type": "object",
        "description": "per confidence bin: mean confidence, accuracy and share of the weight",
        "required": ["confidence", "accuracy", "weight"],
        "properties": {"confidence": _UNITS, "accuracy": _UNITS, "weight": _UNITS},
        "additionalProperties": False,
    },
}

#: the cost of a model's decisions and of its baselines, when the model has a cost matrix
#: (docs/measures.md, "Cost"): any finite number (a negative cost is a benefit)
_COST = {name: _REF_VALUE for name in COST_MEASURES}

EstimatorName = Annotated[
    str, msgspec.Meta(pattern=r"^(cumulative|window:[1-9][0-9]*|fading:[0-9.eE+-]+)$")
]
#: every measure of one estimate (docs/measures.md); per-class ones are named by their class
Measures = Annotated[
    dict[str, Any],
    msgspec.Meta(
        extra_json_schema={
            "required": [*SCALAR_MEASURES, "warming_up"],
            "properties": {
                **{
                    name: _COUNTS.get(name, _REF_VALUE if name in _SIGNED else _REF_UNIT)
                    for name in SCALAR_MEASURES
                },
                "warming_up": _WARMING_UP,
                **_PROBABILISTIC,
                **_COST,
            },
            "patternProperties": {
                r"^(precision|recall|f1)\[.+\]$": _REF_UNIT,
                r"^(precision|recall)_(lo|hi)\[.+\]$": _REF_UNIT,
                r"^(precision|recall|f1)_positive$": _REF_UNIT,
                r"^(precision|recall)_positive_(lo|hi)$": _REF_UNIT,
                f"^normalized_({_NORMALIZED})$": _REF_UNIT,
            },
            "additionalProperties": False,
        }
    ),
]
_DELAYED = ("accuracy", "kappa", "kappa_plus")
#: the delayed-label block of one estimate: the initial and final views, Ψ_α and the bins
DelayedBlock = Annotated[
    dict[str, Any],
    msgspec.Meta(
        extra_json_schema={
            "required": ["n"]
            + [f"{m}_{view}" for m in _DELAYED for view in ("initial", "final")]
            + [f"{kind}_{m}" for kind in ("psi", "binned") for m in _DELAYED],
            "properties": {
                "n": {"type": "integer", "minimum": 0},
                # Ψ_α of the scores, once an outcome had scores on every prediction
                "n_psi_scored": {"type": "integer", "minimum": 0},
            },
            "patternProperties": {
                r"^(accuracy|kappa|kappa_plus)_(initial|final)$": _REF_VALUE,
                r"^psi_(accuracy|kappa|kappa_plus|log_loss|brier)$": _REF_VALUE,
                r"^binned_(accuracy|kappa|kappa_plus)$": {
                    "type": "array",
                    "minItems": 1,
                    "items": _REF_VALUE,
                },
            },
            "additionalProperties": False,
        }
    ),
]
ModelId = Annotated[str, msgspec.Meta(min_length=1)]
EventTime = Annotated[int, msgspec.Meta(ge=0)]


Millis = Annotated[float, msgspec.Meta(ge=0, description="ms")]


class ClassDelay(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The label delays of the outcomes of one true class: how many, and their quantiles (ms,
    within ±4.4 %: docs/measures.md, "Label delay by class")."""

    n: Annotated[int, msgspec.Meta(ge=1)]
    p50: Millis
    p90: Millis
    p99: Millis


class DelayTest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Kruskal–Wallis test of "every class's labels are as late": H, its degrees of freedom
    (classes − 1), p-value, and whether p is below 1 − ``confidence``."""

    h: Annotated[float, msgspec.Meta(ge=0)]
    df: Annotated[int, msgspec.Meta(ge=0)]
    p_value: Annotated[float, msgspec.Meta(ge=0, le=1)]
    significant: bool


class Latency(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Label latency (t_label − t_instance, ms) of the model's outcomes: mean and max; the
    quantiles over ``n`` outcomes (all but those of a state written before they were kept), by
    true class too, and the test of whether the delay depends on the class."""

    mean: float | None
    max: Annotated[int, msgspec.Meta(ge=0)]
    n: Annotated[int, msgspec.Meta(ge=0)] | None = None
    p50: Millis | None = None
    p90: Millis | None = None
    p99: Millis | None = None
    by_class: dict[str, ClassDelay] | None = None
    classes_differ: DelayTest | None = None


class InitialMetricsRecord(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    tag_field="view",
    tag="initial",
    omit_defaults=True,
):
    """Every measure of one model's first predictions, under every estimator; with ``slice``,
    of the model's outcomes in that slice."""

    kind: Literal["metrics"]
    model_id: ModelId
    ts: Annotated[int, msgspec.Meta(ge=0, description="event time (ms) of the latest label")]
    n: Annotated[int, msgspec.Meta(ge=1, description="outcomes of the model (of its slice) so far")]
    estimators: Annotated[dict[EstimatorName, Measures], msgspec.Meta(min_length=1)]
    slice: (
        Annotated[
            str,
            msgspec.Meta(
                description="the slice (slices.by) these numbers are of: one of the model's top "
                'slices, or "(other)" for the rest; absent: the whole model'
            ),
        ]
        | None
    ) = None

    @property
    def view(self) -> str:
        """``initial`` or ``final``: the tag, encoded as the record's first field."""
        return self.__struct_config__.tag


class FinalMetricsRecord(InitialMetricsRecord, frozen=True, tag="final", kw_only=True):
    """Every measure of one model's predictions in force at the label, under every estimator;
    with the delayed-label block and the label latency."""

    delayed: dict[EstimatorName, DelayedBlock]
    latency_ms: Latency
    slices: (
        Annotated[
            list[str],
            msgspec.Meta(
                description="the whole model's record, when slices are on: the slices that have "
                'records of their own now (the top slices, then "(other)")'
            ),
        ]
        | None
    ) = None


#: Key: model_id; null where a measure is undefined.
MetricsRecord = InitialMetricsRecord | FinalMetricsRecord


class DriftAlarmRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A drift detector fired for a model; where it estimates the change began. Key: model_id."""

    kind: Literal["drift_alarm"]
    model_id: ModelId
    ts: Annotated[int, msgspec.Meta(ge=0, description="label time (ms) of the outcome that fired")]
    view: Literal["final"]
    detector: Literal["page_hinkley", "ratio_page_hinkley"]
    statistic: Annotated[float, msgspec.Meta(description="Page-Hinkley m_T − M_T")]
    threshold: Annotated[float, msgspec.Meta(gt=0, description="λ")]
    n: Annotated[int, msgspec.Meta(ge=1, description="index of the outcome at which it fired")]
    estimate: Annotated[
        float | None, msgspec.Meta(description="the fading error, or the ratio R of Algorithm 4")
    ]
    instance_id: Annotated[
        str, msgspec.Meta(min_length=1, description="instance of the outcome that fired")
    ]
    instance_ts: Annotated[
        int, msgspec.Meta(ge=0, description="instance time (ms) of the outcome that fired")
    ]
    change_n: (
        Annotated[
            int,
            msgspec.Meta(
                ge=1,
                description="index of the outcome at the Page-Hinkley minimum since the last "
                "reset (the last with m_t = M_T): the change is estimated to begin with the "
                "next one; null when not known (a detector restored from a checkpoint that did "
                "not keep it)",
            ),
        ]
        | None
    )
    change_ts: (
        Annotated[int, msgspec.Meta(ge=0, description="label time (ms) of the change_n outcome")]
        | None
    )
    change_instance_id: (
        Annotated[str, msgspec.Meta(min_length=1, description="instance of the change_n outcome")]
        | None
    )
    change_instance_ts: (
        Annotated[int, msgspec.Meta(ge=0, description="instance time (ms) of the change_n outcome")]
        | None
    )
    estimate_before: Annotated[
        float | None,
        msgspec.Meta(
            description="mean of the monitored estimate from the last reset through change_n"
        ),
    ]
    estimate_after: Annotated[
        float | None,
        msgspec.Meta(description="mean of the monitored estimate after change_n through n"),
    ]
    settings: Annotated[
        dict[str, str | bool | int | float],
        msgspec.Meta(description="the detector's settings, as [[detectors]] takes them"),
    ]


class PairMeasures(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The comparison of two models under one estimator."""

    n: Annotated[int, msgspec.Meta(ge=0)]
    q_statistic: Annotated[
        float | None, msgspec.Meta(description="ln(S_A/S_B): < 0 means A has less loss")
    ]
    mcnemar: Annotated[float | None, msgspec.Meta(description="signed: > 0 means B is better")]
    n01: Annotated[float, msgspec.Meta(ge=0, description="A wrong, B right")]
    n10: Annotated[float, msgspec.Meta(ge=0, description="B wrong, A right")]
    significant: Annotated[
        float,
        msgspec.Meta(description="|mcnemar| > 6.635 (99 %)", extra_json_schema={"enum": [0, 1]}),
    ]
    leader: str | None
    n_kish: Annotated[
        float, msgspec.Meta(ge=0, description="effective pairs: n, (Σw)²/Σw² under fading")
    ]
    accuracy_difference: Annotated[
        float | None,
        msgspec.Meta(description="accuracy(B) − accuracy(A) on the pairs: > 0 means B is better"),
    ]
    accuracy_difference_lo: Annotated[
        float | None, msgspec.Meta(description="lower bound (Wald, paired proportions)")
    ]
    accuracy_difference_hi: Annotated[
        float | None, msgspec.Meta(description="upper bound (Wald, paired proportions)")
    ]
    warming_up: Annotated[bool, msgspec.Meta(description="n_kish is below the configured min_n")]
    # present once a pair had scores on both sides (docs/measures.md, "Comparisons")
    n_scored: Annotated[
        int, msgspec.Meta(ge=0, description="pairs both of whose final predictions had scores")
    ] = 0
    log_loss_difference: Annotated[
        float | None,
        msgspec.Meta(
            description="log_loss(A) − log_loss(B) on the scored pairs: > 0 means B is better"
        ),
    ] = None
    log_loss_difference_lo: Annotated[
        float | None, msgspec.Meta(description="lower bound (normal, paired differences)")
    ] = None
    log_loss_difference_hi: Annotated[
        float | None, msgspec.Meta(description="upper bound (normal, paired differences)")
    ] = None


class ComparisonRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Q statistic and signed McNemar of model_a vs model_b over the instances both predicted.
    Key: model_a|model_b."""

    kind: Literal["comparison"]
    pair: Annotated[str, msgspec.Meta(pattern=r"^.+\|.+$")]
    model_a: ModelId
    model_b: ModelId
    ts: EventTime
    n: Annotated[int, msgspec.Meta(ge=1, description="paired instances so far")]
    estimators: Annotated[dict[EstimatorName, PairMeasures], msgspec.Meta(min_length=1)]


Digits = Annotated[str, msgspec.Meta(pattern="^[0-9]+$")]


class DeadLetterHeaders(
    msgspec.Struct,
    frozen=True,
    rename={
        "topic": "streameval.source.topic",
        "partition": "streameval.source.partition",
        "offset": "streameval.source.offset",
        "reason": "streameval.reason",
        "code": "streameval.reason.code",
        "value_bytes": "streameval.value.bytes",
    },
):
    """A malformed input message. The value is the ORIGINAL bytes, unchanged, cut to the
    first 1048576 bytes if longer (so this schema describes the Kafka headers, not the value).
    Key: the original key."""

    topic: ModelId
    partition: Digits
    offset: Digits
    reason: Annotated[str, msgspec.Meta(min_length=1, description="what is wrong and where")]
    code: Annotated[
        str, msgspec.Meta(description="a short code to count by (all of them: docs/replay.md)")
    ] = ""
    value_bytes: Annotated[
        str,
        msgspec.Meta(
            pattern="^[0-9]+$", description="only when the value was cut: its original length"
        ),
    ] = ""


Count = Annotated[int, msgspec.Meta(ge=0)]
#: a share of a cohort: a count of it over its predicted instances (None while none was)
Share = Annotated[float, msgspec.Meta(ge=0)] | None


class CohortClass(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The instances of a cohort labelled so far with one class."""

    labelled: Count
    share: Share


class Cohort(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The instances a model first predicted within ``cohort_ms`` from ``start``, and how many
    of them have their label so far."""

    start: Annotated[int, msgspec.Meta(ge=0, description="event time (ms) the cohort begins")]
    predicted: Annotated[int, msgspec.Meta(description="instances the model first predicted")]
    labelled: Annotated[int, msgspec.Meta(ge=0, description="of them, labelled so far")]
    share: Annotated[Share, msgspec.Meta(description="labelled / predicted")]
    by_class: Annotated[
        dict[str, CohortClass], msgspec.Meta(description="the labelled ones by class of label")
    ]


class LabelMaturityRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How much of each prediction-time cohort of a model is labelled so far, by class, and
    how late its labels come by class (docs/measures.md, "Label maturity"). One per model each
    ``maturity.every_ms`` of event time while it has traffic. Key: model_id."""

    kind: Literal["label_maturity"]
    model_id: ModelId
    ts: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="event time (ms) it is as of: the predictions and labels before it",
        ),
    ]
    n: Annotated[int, msgspec.Meta(ge=0, description="outcomes of the model so far")]
    cohort_ms: Annotated[int, msgspec.Meta(ge=1000, description="width of a cohort (ms)")]
    predicted: Annotated[int, msgspec.Meta(description="instances predicted, every cohort")]
    labelled: Annotated[int, msgspec.Meta(ge=0, description="of them, labelled so far")]
    labelled_by_class: dict[str, Count]
    cohorts: Annotated[list[Cohort], msgspec.Meta(description="the latest cohorts, oldest first")]
    latency_ms: Annotated[
        Latency | None,
        msgspec.Meta(description="the label delays by class, as in the final metrics record"),
    ]


#: What the service publishes; every one has ``kind``, ``model_id`` or ``pair``, ``ts``, ``n``.
Record = (
    InitialMetricsRecord
    | FinalMetricsRecord
    | DriftAlarmRecord
    | ComparisonRecord
    | LabelMaturityRecord
)


# -- records -------------------------------------------------------------------------------
_RECORDS: dict[str, Any] = {
    "metrics": MetricsRecord,
    "drift_alarm": DriftAlarmRecord,
    "comparison": ComparisonRecord,
    "label_maturity": LabelMaturityRecord,
}
_DECODERS = {kind: msgspec.json.Decoder(kind_type) for kind, kind_type in _RECORDS.items()}


def check_record(record: dict[str, Any]) -> Any:
    """An output record as its type; ``msgspec.ValidationError`` says where it differs."""
    return msgspec.convert(record, _RECORDS[record["kind"]])


def decode_record(kind: str, data: bytes) -> Any:
    """A published record (``kind``: metrics, drift_alarm or comparison) as its type.

    >>> alarm = decode_record("drift_alarm", b'{"kind": "drift_alarm", "model_id": "m", '
    ...     b'"ts": 5, "view": "final", "detector": "page_hinkley", "statistic": 101.5, '
    ...     b'"threshold": 100, "n": 21042, "estimate": 0.41, "instance_id": "i9", '
    ...     b'"instance_ts": 3, "change_n": 20310, "change_ts": 2, "change_instance_id": "i4", '
    ...     b'"change_instance_ts": 1, "estimate_before": 0.2, "estimate_after": 0.37, '
    ...     b'"settings": {"type": "page_hinkley", "threshold": 100.0}}')
    >>> alarm.detector, alarm.n, alarm.change_n
    ('page_hinkley', 21042, 20310)
    """
    return _DECODERS[kind].decode(data)
