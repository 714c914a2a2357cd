"""The pure evaluation core: numpy and the standard library only.

Nothing in this package imports Kafka, Faust, Prometheus or asyncio (a test enforces it): it is
where the papers live and where the speed comes from, and it is tested against independent
references without a broker.
"""

from pipeline.core.compare import MCNEMAR_THRESHOLD, ModelComparison
from pipeline.core.delayed import DelayedBatch, DelayedEvaluator
from pipeline.core.drift import (
    DEFAULT_DETECTORS,
    Alarm,
    FadingErrorPageHinkley,
    PageHinkley,
    RatioPageHinkley,
    make_detector,
)
from pipeline.core.estimators import (
    ConfusionEstimator,
    ConfusionSnapshot,
    CumulativeConfusion,
    FadingConfusion,
    WindowConfusion,
    parse_estimator,
)
from pipeline.core.evaluator import DEFAULT_ESTIMATORS, Evaluator
from pipeline.core.join import DROP_REASONS, Join, Outcome
from pipeline.core.labels import DEFAULT_MAX_CLASSES, LabelEncoder
from pipeline.core.measures import SCALAR_MEASURES, compute_measures
from pipeline.core.model import ModelEvaluator, PairEvaluator
from pipeline.core.normalize import normalize

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
]
