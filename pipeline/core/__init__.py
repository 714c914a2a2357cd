"""The pure evaluation core: numpy and the standard library only.

Nothing in this package imports Kafka, Faust, Prometheus or asyncio (a test enforces it): it is
where the papers live and where the speed comes from, and it is tested against independent
references without a broker.
"""

from pipeline.core.estimators import (
    ConfusionEstimator,
    ConfusionSnapshot,
    CumulativeConfusion,
    FadingConfusion,
    WindowConfusion,
    parse_estimator,
)
from pipeline.core.evaluator import DEFAULT_ESTIMATORS, Evaluator
from pipeline.core.labels import DEFAULT_MAX_CLASSES, LabelEncoder
from pipeline.core.measures import SCALAR_MEASURES, compute_measures

__all__ = [
    "DEFAULT_ESTIMATORS",
    "DEFAULT_MAX_CLASSES",
    "SCALAR_MEASURES",
    "ConfusionEstimator",
    "ConfusionSnapshot",
    "CumulativeConfusion",
    "Evaluator",
    "FadingConfusion",
    "LabelEncoder",
    "WindowConfusion",
    "compute_measures",
    "parse_estimator",
]
