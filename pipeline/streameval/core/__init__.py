"""The pure evaluation core: numpy and the standard library only.

Nothing in this package imports Kafka, Faust, Prometheus or asyncio (a test enforces it): it is
where the papers live and where the speed comes from, and it is tested against independent
references without a broker.
"""

from streameval.core.alarm import Alarm
from streameval.core.compare import MCNEMAR_THRESHOLD, ModelComparison
from streameval.core.delayed import DelayedBatch, DelayedEvaluator
from streameval.core.drift import (
    DEFAULT_DETECTORS,
    FadingErrorPageHinkley,
    RatioPageHinkley,
    make_detector,
)
from streameval.core.estimators import (
    ConfusionEstimator,
    CumulativeConfusion,
    FadingConfusion,
    WindowConfusion,
    parse_estimator,
)
from streameval.core.evaluator import DEFAULT_ESTIMATORS, Evaluator
from streameval.core.forgetting import EstimatorSpec, parse_estimators
from streameval.core.join import Join
from streameval.core.join_rules import DROP_REASONS
from streameval.core.labels import DEFAULT_MAX_CLASSES, LabelEncoder
from streameval.core.measures import SCALAR_MEASURES, ConfusionSnapshot, compute_measures
from streameval.core.model import ModelEvaluator
from streameval.core.normalize import normalize
from streameval.core.outcome import Outcome
from streameval.core.page_hinkley import PageHinkley
from streameval.core.pair import PairEvaluator

__all__ = [
    "DEFAULT_DETECTORS",
    "DEFAULT_ESTIMATORS",
    "DEFAULT_MAX_CLASSES",
    "DROP_REASONS",
    "MCNEMAR_THRESHOLD",
    "SCALAR_MEASURES",
    "Alarm",
    "ConfusionEstimator",
    "ConfusionSnapshot",
    "CumulativeConfusion",
    "DelayedBatch",
    "DelayedEvaluator",
    "EstimatorSpec",
    "Evaluator",
    "FadingConfusion",
    "FadingErrorPageHinkley",
    "Join",
    "LabelEncoder",
    "ModelComparison",
    "ModelEvaluator",
    "Outcome",
    "PageHinkley",
    "PairEvaluator",
    "RatioPageHinkley",
    "WindowConfusion",
    "compute_measures",
    "make_detector",
    "normalize",
    "parse_estimator",
    "parse_estimators",
]
