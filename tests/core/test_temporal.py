"""E4 and E14 (docs/measures.md): Žliobaitė et al.'s Algorithm 1, P(T), Δ(ℓ), temporal
correction."""

import json
import math

import pytest
from streameval.reference.temporal import (
    ZliobaiteKappa,
    label_persistence,
    temporal_correction,
    temporal_dependence,
)


def test_e4_algorithm_1():
    z = ZliobaiteKappa(n_classes=2, new_weight=0.5)
    z.update([0, 0, 0, 1], [0, 0, 1, 1])
    m = z.measures()
    assert m["accuracy"] == pytest.approx(0.6875)
    assert z.state()["prior"] == pytest.approx([0.46875, 0.53125])
    assert z.state()["predicted"] == pytest.approx([0.21875, 0.78125])
    assert z.state()["same"] == pytest.approx([0.9375, 0.25])
    assert m["p_ran"] == pytest.approx(0.517578125)
    assert m["p_per"] == pytest.approx(0.572265625)
    assert m["kappa"] == pytest.approx(0.352227, abs=5e-7)
    assert m["kappa_temporal"] == pytest.approx(0.269406, abs=5e-7)
    assert m["kappa_plus"] == pytest.approx(0.308046, abs=5e-7)


def test_algorithm_1_in_steps_and_through_state_is_the_same():
    whole = ZliobaiteKappa(3, 0.1)
    whole.update([0, 1, 2, 2, 1, 0, 0], [0, 1, 1, 2, 1, 2, 0])
    part = ZliobaiteKappa(3, 0.1)
    part.update([0, 1, 2], [0, 1, 1])
    part = ZliobaiteKappa.from_state(json.loads(json.dumps(part.state())))
    part.update([2, 1, 0, 0], [2, 1, 2, 0])
    assert part.measures() == whole.measures()


def test_e14_diagnostics_and_temporal_correction():
    y = [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]  # the labels of E3
    assert label_persistence(y) == pytest.approx(7 / 9)
    assert temporal_dependence(y, order=1, cls=0) == pytest.approx(0.1333, abs=5e-5)
    assert math.isnan(temporal_dependence([1, 1], order=2, cls=0))
    corrected = temporal_correction([0.6, 0.4], [0.1, 0.9], [0.5, 0.5])
    assert corrected.tolist() == pytest.approx([0.142857, 0.857143], abs=5e-7)
    assert corrected.argmax() == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ZliobaiteKappa(2, 1.0), "new_weight=1.0"),
        (lambda: ZliobaiteKappa(0), "n_classes=0"),
        (lambda: ZliobaiteKappa(2).update([0, 2], [0, 0]), "class 2 is not in 0..1"),
        (lambda: temporal_dependence([0], 0, 0), "order=0"),
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()
