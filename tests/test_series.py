"""What the worker's export_* settings turn into, and which values it refuses at start-up."""

import pytest
from streameval.app.settings import SettingsError, load_settings
from streameval.series import DEFAULT_MEASURES, EXPORTABLE_MEASURES, Selection, bin_label

BROKER = {"bootstrap": "127.0.0.1:1", "metrics_port": 0}


def _load(tmp_path, worker: str, evaluation: str = "", **overrides):
    path = tmp_path / "worker.toml"
    path.write_text(f"{evaluation}\n[worker]\n{worker}\n")
    return load_settings(path, **BROKER, **overrides)


def test_the_defaults_are_the_default_selection(tmp_path):
    settings, _ = _load(tmp_path, "")
    assert settings.export_selection() == Selection()
    assert Selection().measures == frozenset(DEFAULT_MEASURES)


def test_the_worker_exports_what_its_settings_choose(tmp_path, monkeypatch):
    from streameval.app.faust_app import create_app

    monkeypatch.setenv("STREAMEVAL_EXPORT_BINS", "4")  # the environment, over the file
    settings, config = _load(
        tmp_path,
        'export_measures = ["accuracy", "n", "recall"]\nexport_initial_measures = []\n'
        'export_estimators = ["window:500"]\nexport_classes = 0\nexport_bins = 20',
        'estimators = ["cumulative", "window:500"]',
    )
    app = create_app(settings, config)
    assert app.exporter.selection == Selection(
        frozenset({"accuracy", "n", "recall"}), frozenset(), frozenset({"window:500"}), 0, 4
    )
    settings, _ = _load(tmp_path, 'export_measures = ["all"]\nexport_initial_measures = ["all"]')
    assert settings.export_selection().measures is None
    assert settings.export_selection().initial_measures is None


@pytest.mark.parametrize(
    ("worker", "message"),
    [
        ('export_measures = ["acuracy"]',
         r"export_measures \(or \$STREAMEVAL_EXPORT_MEASURES\) = \['acuracy'\]: 'acuracy' is not "
         r"a measure; allowed: n, n_effective, accuracy, .*, or \[\"all\"\]"),
        ('export_initial_measures = ["all", "kappa"]',
         r"export_initial_measures .* = \['all', 'kappa'\]: \"all\" stands alone"),
        ('export_measures = "accuracy"', r"export_measures .* = 'accuracy': a list belongs here: "
         r"export_measures = \[\"accuracy\"\] in \[worker\]"),
        ('export_estimators = ["window:500"]',
         r"export_estimators \(or \$STREAMEVAL_EXPORT_ESTIMATORS\) = \['window:500'\]: "
         r"'window:500' is not one of the configured estimators; allowed: cumulative, "
         r"window:1000, fading:0.999"),
        ("export_estimators = []", r"export_estimators .* = \[\]: List should have at least 1"),
        ("export_classes = -1", r"export_classes .* = -1: Input should be greater than or equal "
         r"to 0"),
        ("export_bins = -3", r"export_bins .* = -3: Input should be greater than or equal to 0"),
    ],
)  # fmt: skip
def test_a_bad_export_setting_is_named_with_its_value_and_what_is_allowed(
    tmp_path, worker, message
):
    with pytest.raises(SettingsError, match=message):
        _load(tmp_path, worker)


def test_every_measure_a_record_carries_can_be_chosen():
    """The names a setting may list are those of an estimate in the records' schema, and no
    others but ``label_delay``, which selects the quantiles of the final record's latency, and
    ``label_maturity``, every cohort of the label-maturity record."""
    import re
    import typing

    from streameval.records import Measures

    schema = typing.get_args(Measures)[1].extra_json_schema
    names = set(schema["properties"])
    for pattern in schema["patternProperties"]:
        names |= {m for m in EXPORTABLE_MEASURES if re.fullmatch(pattern, m)}
        names |= {m for m in EXPORTABLE_MEASURES if re.fullmatch(pattern, f"{m}[c]")}
    assert names | {"label_delay", "label_maturity"} == set(EXPORTABLE_MEASURES)


@pytest.mark.parametrize("bins", [1, 10, 100, 999, 1000, 12345])
def test_bin_labels_sort_in_the_order_of_the_bins(bins):
    """Dashboards sort the ``bin`` label as text: 1000 bins (the most ECE bins, and delayed
    bins may be more) must not put 1000 between 100 and 101; up to 999 they stay 001 …"""
    labels = [bin_label(i, bins) for i in range(bins)]
    assert labels == sorted(labels) and len(set(labels)) == bins
    assert labels[0] == "0" * (max(3, len(str(bins))) - 1) + "1"
