"""The label encoder: discovery order, the class cap, atomic batches, state."""

import json

import numpy as np
import pytest
from streameval.core import LabelEncoder


def test_classes_are_indexed_in_order_of_first_appearance():
    enc = LabelEncoder()
    assert enc.encode([3, 1, 3, 7]).tolist() == [0, 1, 0, 2]
    assert enc.encode(["a", 1]).tolist() == [3, 1]
    assert enc.classes == [3, 1, 7, "a"]


def test_numpy_scalars_are_plain_and_one_name_means_one_class():
    enc = LabelEncoder()
    assert enc.encode([1, np.int64(1), 2]).tolist() == [0, 0, 1]
    assert type(enc.classes[0]) is int
    # "1" would be a second class with the same name on the wire: refused, nothing added
    with pytest.raises(ValueError, match=r"'1' and the known class 1 would be the same class"):
        enc.encode(["x", "1"])
    assert enc.classes == [1, 2]
    with pytest.raises(ValueError, match="same class name"):
        LabelEncoder().encode(["7", 7])


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
