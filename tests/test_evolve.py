"""A restart under another configuration: which settings change freely, which add parts that
start fresh, which are refused with the setting, both values and the reset that helps."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from streameval.app.evolve import (
    SETTINGS,
    Stored,
    join_shape,
    judge,
    model_shape,
    model_shape_of,
    pair_shape,
)
from streameval.config import EvaluationConfig, load_config
from streameval.core.model import ModelEvaluator
from streameval.core.outcome import Outcome

BASE = {
    "estimators": ["cumulative", "window:1000", "fading:0.999"],
    "models": {"champion": {"positive_label": "yes"}, "challenger": {"positive_label": "yes"}},
    "comparisons": [{"a": "champion", "b": "challenger"}],
}


def _config(**changes) -> EvaluationConfig:
    return load_config(**{**BASE, **changes})


def _stored(config: EvaluationConfig, models=("champion", "challenger", "baseline")) -> Stored:
    """What checkpoints written under ``config`` hold: three join partitions, the models, the
    configured pairs."""
    return Stored(
        joins={q: join_shape(config) for q in range(3)},
        models={m: model_shape(config, m) for m in models},
        pairs={f"{p.a}|{p.b}": (p.a, p.b, pair_shape(config)) for p in config.comparisons},
    )


def _settings(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            names += _settings(kind, f"{prefix}{name}.")
        else:
            names.append(prefix + name)
    return names


def test_every_evaluation_setting_is_classified():
    """A setting added to the configuration must say how a restart meets its change (and
    docs/worker.md gets its row)."""
    from streameval.config import ModelConfig

    settings = _settings(EvaluationConfig) + [f"models.*.{n}" for n in ModelConfig.model_fields]
    settings.remove("models")
    assert sorted(settings) == sorted(SETTINGS)


@pytest.mark.parametrize(
    "change",
    [{"publish_every": 7}, {"normalize_max_count": 10}, {"join": {"max_future_ms": 5}}],
    ids=["publish_every", "normalize_max_count", "max_future_ms"],
)
def test_free_settings_change_nothing_stored(change):
    assert not judge(_stored(_config()), _config(**change)).changes


def test_additions_start_fresh_and_keep_the_rest():
    old = _config()
    new = _config(
        estimators=["window:300", *BASE["estimators"]],
        comparisons=[*BASE["comparisons"], {"a": "baseline", "b": "champion"}],
        models={**BASE["models"], "newcomer": {"positive_label": 1}},
        detectors=[{"type": "page_hinkley", "threshold": 50, "standardize": True}],
    )
    verdict = judge(_stored(old), new)
    assert verdict.refusals == []
    assert "estimator window:300 of model champion" in verdict.added
    assert "estimator window:300 of pair champion|challenger" in verdict.added
    assert verdict.new == ["pair baseline|champion", "model newcomer"]
    assert any(f.startswith("detector page_hinkley(") and "threshold=50" in f
               for f in verdict.added)  # fmt: skip
    assert "detector page_hinkley(fading_factor=0.995, delta=0.05, threshold=60" in " ".join(
        verdict.dropped
    )  # the default, replaced by the configured one
    # the default detector written out with its defaults is the same detector
    same = [{"type": "page_hinkley", "threshold": 60, "delta": 0.05, "standardize": True}]
    assert not judge(_stored(old), _config(detectors=same)).changes


def test_a_detector_sealed_before_a_setting_existed_is_the_same_detector():
    """A seal written before ``standardize`` existed names its detectors without it (they ran
    with it off); a configuration that writes the same detector out, with it off, changes
    nothing, and a partial one is the configured default, whatever the seal's class defaults."""
    paper = {"type": "page_hinkley", "fading_factor": 0.999, "delta": 0.1, "threshold": 100,
             "min_instances": 30, "restart_threshold": 0, "warmup": 0}  # fmt: skip
    config = _config(detectors=[{**paper, "standardize": False}])
    sealed = _stored(config)
    for shape in sealed.models.values():  # as the earlier release sealed it (canonical)
        shape["detectors"] = [{k: float(v) if k != "type" else v for k, v in paper.items()}]
    assert not judge(sealed, config).changes
    partial = _config(detectors=[{"type": "page_hinkley", "threshold": 50, "standardize": True}])
    assert not judge(_stored(partial), partial).changes
    assert judge(sealed, _config()).dropped  # the default is another detector


def test_a_window_size_is_refused_with_the_estimator_to_reset():
    verdict = judge(_stored(_config()),
                    _config(estimators=["cumulative", "window:2000", "fading:0.999"]))  # fmt: skip
    [refusal] = verdict.refusals
    assert refusal.setting == "estimators"
    assert refusal.old == ["cumulative", "window:1000", "fading:0.999"]
    assert refusal.new == ["cumulative", "window:2000", "fading:0.999"]
    assert refusal.parts == ("model baseline", "model challenger", "model champion",
                             "pair champion|challenger")  # fmt: skip
    assert verdict.reset_options() == ["--estimator", "window:1000"]
    message = verdict.message("app 'fraud'", "streameval state reset --app-id fraud",
                              "streameval state show --app-id fraud")  # fmt: skip
    assert "\n" not in message
    assert (
        "estimators was [cumulative, window:1000, fading:0.999] and is now [cumulative, "
        "window:2000, fading:0.999]: estimator window:1000 would lose its history"
    ) in message
    assert "`streameval state reset --app-id fraud --estimator window:1000`" in message
    assert "nothing has been changed" in message


def test_settings_that_shape_a_part_are_refused_with_its_reset():
    stored = _stored(_config())
    verdict = judge(stored, _config(join={"label_grace_ms": 2000, "max_pending": 10}))
    assert [(r.setting, r.old, r.new) for r in verdict.refusals] == [
        ("join.label_grace_ms", 5000, 2000), ("join.max_pending", 100_000_000, 10)]  # fmt: skip
    assert verdict.reset_options() == ["--join"]

    models = {**BASE["models"], "champion": {"positive_label": "no"}}
    [refusal] = judge(stored, _config(models=models)).refusals
    assert (refusal.setting, refusal.old, refusal.new) == ("models.champion.positive_label",
                                                           "yes", "no")  # fmt: skip
    assert refusal.reset == ("--model", "champion")

    verdict = judge(stored, _config(delayed={"bins": 10}))
    [refusal] = verdict.refusals
    assert (refusal.setting, refusal.old, refusal.new) == ("delayed.bins", 100, 10)
    assert verdict.reset_options() == ["--all-models"]  # every model has one

    only = Stored(models={"champion": model_shape(_config(max_classes=5), "champion")})
    verdict = judge(only, _config())
    assert [(r.setting, r.old, r.new) for r in verdict.refusals] == [("max_classes", 5, 1000)]


def test_a_pair_no_longer_listed_is_refused_not_dropped():
    verdict = judge(_stored(_config()), _config(comparisons=[]))
    [refusal] = verdict.refusals
    assert (refusal.setting, refusal.old, refusal.new) == ("comparisons",
                                                           ["champion:challenger"], [])  # fmt: skip
    assert "pair champion:challenger would lose its history" in refusal.describe()
    assert verdict.reset_options() == ["--pair", "champion:challenger"]


def test_several_refusals_make_one_command():
    new = _config(estimators=["cumulative", "window:10", "fading:0.9"],
                  join={"label_ttl_ms": 60_000})  # fmt: skip
    verdict = judge(_stored(_config()), new)
    assert verdict.reset_options() == ["--join", "--estimator", "window:1000",
                                       "--estimator", "fading:0.999"]  # fmt: skip


def test_a_reset_join_takes_the_configured_rules():
    stored = _stored(_config())
    stored.joins = {0: None, 1: None, 2: None}
    verdict = judge(stored, _config(join={"label_grace_ms": 1}))
    assert verdict.refusals == [] and verdict.new == ["join partitions 0, 1, 2 (reset)"]
    assert not verdict.changes


def test_the_scores_settings_shape_only_models_that_had_scores():
    """A model none of whose predictions had scores takes a changed scores.ece_bins; one that
    had scores is refused, with its own reset."""
    unscored = model_shape_of(ModelEvaluator("baseline").settings())
    assert unscored["ece_bins"] is None and unscored["auc_max_values"] is None
    scored = ModelEvaluator("champion", positive_label="yes")
    scored.update([Outcome("champion", "i1", "yes", (0,), ("yes",), 0, 5, 5,
                           (("no", 0.3, "yes", 0.7),))])  # fmt: skip
    stored = Stored(models={"baseline": unscored, "champion": model_shape_of(scored.settings())})
    [refusal] = judge(stored, _config(scores={"ece_bins": 20})).refusals
    assert (refusal.setting, refusal.old, refusal.new) == ("scores.ece_bins", 10, 20)
    assert refusal.reset == ("--model", "champion")
    assert not judge(
        Stored(models={"baseline": unscored}), _config(scores={"ece_bins": 20})
    ).changes
