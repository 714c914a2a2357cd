"""The label encoder: discovery order, the class cap, atomic batches, state."""

import json

import numpy as np
import pytest

from pipeline.core import LabelEncoder


def test_classes_are_indexed_in_order_of_first_appearance():
    enc = LabelEncoder()
    assert enc.encode([3, 1, 3, 7]).tolist() == [0, 1, 0, 2]
    assert enc.encode(["a", 1]).tolist() == [3, 1]
    assert enc.classes == [3, 1, 7, "a"]


def test_string_and_integer_labels_are_distinct_and_numpy_scalars_are_plain():
    enc = LabelEncoder()
    codes = enc.encode(["1", 1, np.int64(1), np.str_("1")])
    assert codes.tolist() == [0, 1, 1, 0]
    assert enc.classes == ["1", 1]
    assert type(enc.classes[1]) is int


def test_the_cap_names_the_label_and_changes_nothing():
    enc = LabelEncoder(max_classes=3)
    enc.encode(["a", "b"])
    with pytest.raises(ValueError, match=r"'d' would be class number 4, over max_classes=3"):
        enc.encode(["c", "a", "d"])
    assert enc.classes == ["a", "b"]  # "c" was not added either
    assert enc.encode(["c"]).tolist() == [2]


@pytest.mark.parametrize("bad", [None, 1.5, True, ("a",)])
def test_labels_must_be_strings_or_integers(bad):
    enc = LabelEncoder()
    with pytest.raises(ValueError, match="must be a str or an int"):
        enc.encode(["ok", bad])
    assert len(enc) == 0


def test_bad_cap():
    with pytest.raises(ValueError, match="max_classes=0"):
        LabelEncoder(max_classes=0)


def test_state_round_trip():
    enc = LabelEncoder(max_classes=10)
    enc.encode(["x", 5, "y"])
    restored = LabelEncoder.from_state(json.loads(json.dumps(enc.state())))
    assert restored.classes == enc.classes and restored.max_classes == 10
    assert restored.encode(["y", "z"]).tolist() == [2, 3]
