"""What ``streameval state reset`` and a move of models between evaluation partitions write
into a partition's changelog: pure functions from the partition's state (the latest value of
every key, as a restore folds it) to the changes of one more checkpoint.

* :func:`reset_join` — a join partition forgets its pending and remembered instances and its
  rules (the configured ones are taken at the next start); it keeps where it is (offsets,
  progress, clock) and the events waiting for the clock, which come after that point.
* :func:`reset_model`, :func:`reset_pair` — an evaluation partition forgets a model's or a
  pair's state and scalars; a model's outcomes waiting for the frontiers stay, and are the
  first the model counts when it starts again.
* :func:`reset_estimator` — every model and pair of a partition forgets one estimator.
* :func:`move` — models and pairs go from one evaluation partition to another (a comparison
  added or removed joins or splits a group of models, and a group is evaluated in one
  partition): their state, scalars and waiting outcomes, and the outcomes of theirs that the
  source had received but not yet read; the source skips those when it reads them.

:func:`summarize_eval` and :func:`summarize_join` give the seal of the checkpoint that writes
such changes. streameval.app.stateops (moves) and streameval.app.state_reset read the
partitions and write the changes, in one Kafka transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from streameval.core.outcome import Outcome
from streameval.core.state import (
    EVENT,
    MEMORY,
    META,
    RECORD,
    WAITING,
    decode_value,
    encode_value,
)

from .evolve import model_shape_of
from .statekeys import (
    GATHERED,
    MATURITY,
    MODEL,
    OUTCOME,
    PAIR,
    PARTS,
    RUN,
    SLICE,
    SLICES,
    STAGE,
    WHOLE,
    decode_state,
    encode_name,
    encode_state,
    model_of,
    owner_of,
    state_chunks,
)
from .wire import WireError, decode_outcomes

__all__ = [
    "apply",
    "move",
    "parts",
    "reset_estimator",
    "reset_join",
    "reset_model",
    "reset_pair",
    "summarize_eval",
    "summarize_join",
    "unread",
    "waiting_outcomes",
    "without_estimator",
]

Items = Mapping[bytes, bytes]
Changes = dict[bytes, bytes | None]


# -- the join -------------------------------------------------------------------------------
def reset_join(items: Items) -> Changes:
    """A join partition without its instances and rules (see the module docstring)."""
    changes: Changes = {k: None for k in items if k[:1] in (RECORD, MEMORY)}
    if META in items:
        meta = decode_value(items[META])
        meta.update(label_grace=None, label_ttl=None, max_pending=None)
        changes[META] = encode_value(meta)
    return changes


def summarize_join(items: Items) -> dict[str, Any]:
    """The seal's summary of a join partition's state (streameval.app.join_stage.JoinStage)."""
    stage = decode_value(items[STAGE]) if STAGE in items else {}
    meta = decode_value(items[META]) if META in items else {}
    rules = None
    if meta.get("label_grace") is not None:
        rules = {
            "label_grace_ms": meta["label_grace"],
            "label_ttl_ms": meta["label_ttl"],
            "max_pending": meta["max_pending"],
        }
    return {
        "join": rules,
        "offset": stage.get("offset", -1),
        "part": stage.get("part", 0),
        "frontier": stage.get("frontier"),
        "pending": sum(1 for k in items if k[:1] == RECORD),
        "remembered": sum(1 for k in items if k[:1] == MEMORY),
        "waiting": sum(1 for k in items if k[:1] == EVENT)
        + sum(len(decode_value(v)) for k, v in items.items() if k[:1] == WAITING),
    }


# -- evaluation partitions --------------------------------------------------------------------
def parts(items: Items) -> tuple[dict[str, dict], dict[str, dict]]:
    """The models' and the pairs' states of an evaluation partition, decoded."""
    whole: dict[bytes, list[tuple[bytes, bytes]]] = {}
    for key, value in items.items():
        if key[:1] in (MODEL, PAIR):
            whole.setdefault(key[:-4], []).append((key[-4:], value))
    models, pairs = {}, {}
    for head, chunks in whole.items():
        state = decode_state(b"".join(v for _, v in sorted(chunks)))
        (models if head[:1] == MODEL else pairs)[head[3:].decode()] = state
    return models, pairs


def reset_model(items: Items, model_id: str) -> Changes:
    changes: Changes = {
        k: None
        for k in items
        if k[:1] in (*PARTS, GATHERED) and k[:1] != PAIR and model_of(owner_of(k)) == model_id
    }
    meta = decode_value(items[STAGE])
    engine = meta["engine"]
    engine["model_last_ts"].pop(model_id, None)
    engine.get("maturity_tick", {}).pop(model_id, None)
    for key in [k for k in engine["published"] if model_of(k) == model_id]:
        del engine["published"][key]  # the model's and its slices' marks
    # its label maturity starts again from the next cohort: its instances pending now were
    # predicted, and counted, before (streameval.core.maturity)
    engine["maturity_late"] = sorted({*engine.get("maturity_late", ()), model_id})
    engine["published"].pop(model_id, None)
    engine["rejected"] = [row for row in engine["rejected"] if row[0] != model_id]
    changes[STAGE] = encode_value(meta)
    return changes


def reset_pair(items: Items, key: str) -> Changes:
    changes: Changes = {k: None for k in items if k[:1] == PAIR and owner_of(k) == key}
    meta = decode_value(items[STAGE])
    engine = meta["engine"]
    engine["pair_last_ts"].pop(key, None)
    engine["published"].pop(key, None)
    changes[STAGE] = encode_value(meta)
    return changes


def reset_estimator(items: Items, name: str) -> tuple[Changes, list[str]]:
    """Every model and pair of the partition without estimator ``name``; the changes, and
    the parts that had it."""
    models, pairs = parts(items)
    changes: Changes = {}
    touched = []
    for tag, kind, states in ((MODEL, "model", models), (PAIR, "pair", pairs)):
        for part, state in states.items():
            if without_estimator(state, name):
                touched.append(f"{kind} {part}")
                changes.update(_rewrite(items, tag, part, state))
    # every model's slices start over (streameval.core.sliced): their evaluators had it too
    changes.update({k: None for k in items if k[:1] in (SLICES, SLICE, GATHERED)})
    return changes, touched


def without_estimator(state: dict[str, Any], name: str) -> bool:
    """Take estimator ``name`` out of a model's or a pair's ``state()`` (in place); whether
    it had it."""
    if "config" in state:  # a model
        if name not in state["config"]["estimators"]:
            return False
        _drop(state["config"]["estimators"], name)
        for view in state["views"].values():
            _drop(view["estimators"], name)
            view["state"].pop(name, None)
        delayed = state["delayed"]
        _drop(delayed["estimators"], name)
        delayed["states"].pop(name, None)
        _drop(delayed.get("fresh", []), name)
        return True
    if name not in state["estimators"]:
        return False
    _drop(state["estimators"], name)
    _drop(state["comparison"]["estimators"], name)
    state["comparison"]["state"].pop(name, None)
    return True


def _drop(names: list[str], name: str) -> None:
    if name in names:
        names.remove(name)


def _rewrite(items: Items, tag: bytes, part: str, state: dict) -> Changes:
    """A part's chunks for ``state``: the changed ones, and the old ones past its end gone."""
    new = dict(state_chunks(tag + encode_name(part), encode_state(state)))
    changes: Changes = {k: v for k, v in new.items() if items.get(k) != v}
    changes.update(
        {k: None for k in items if k[:1] == tag and owner_of(k) == part and k not in new}
    )
    return changes


def waiting_outcomes(items: Items) -> dict[int, list[list]]:
    """The runs of outcomes waiting for the frontiers: run number -> rows (seq, *Outcome)."""
    return {RUN.unpack(k[1:])[0]: decode_value(v) for k, v in items.items() if k[:1] == OUTCOME}


def unread(batches: Iterable[bytes], items: Items, models: set[str]) -> list[Outcome]:
    """The outcomes of ``models`` in the outcome batches (encoded, in the order of the
    partition's topic from the stage's offset on) that an evaluation stage of state ``items``
    has yet to apply, as it would apply them: each join partition's batches once, in order."""
    meta = decode_value(items[STAGE])
    applied = {q: (o, part[0] if part else WHOLE) for q, o, *part in meta["applied"]}
    out: list[Outcome] = []
    for data in batches:
        try:
            batch = decode_outcomes(data)
        except WireError:
            continue  # the stage skips it too
        number = (batch.offset, batch.part)
        if number <= applied.get(batch.partition, (-1, 0)):
            continue
        applied[batch.partition] = number
        out += [outcome for outcome in batch.outcomes if outcome.model_id in models]
    return out


def move(
    source: Items,
    target: Items,
    models: set[str],
    pairs: set[str],
    unread: Iterable[Outcome],
    until: int,
) -> tuple[Changes, Changes]:
    """Move ``models`` and ``pairs`` (keys ``a|b``) from the evaluation partition ``source``
    to ``target``, with the models' waiting outcomes and ``unread`` — their outcomes in the
    source's outcome batches not yet applied, which the source skips below offset ``until``.
    Returns the changes of the source and of the target."""
    pack = RUN.pack
    out_source: Changes = {}

    def moving(key: bytes) -> bool:  # a part of a model (its slices too) or a pair moved
        if key[:1] not in (*PARTS, GATHERED):
            return False
        owner = owner_of(key)
        return owner in pairs if key[:1] == PAIR else model_of(owner) in models

    out_target: Changes = {k: None for k in target if moving(k)}
    for key, value in source.items():
        if moving(key):
            out_source[key] = None
            out_target[key] = value
    src, dst = decode_value(source[STAGE]), decode_value(target[STAGE])
    for field in ("model_last_ts", "pair_last_ts", "published", "maturity_tick"):
        src["engine"].setdefault(field, {})
        dst["engine"].setdefault(field, {})
        for part in list(src["engine"][field]):
            if model_of(part) in models or part in pairs:
                dst["engine"][field][part] = src["engine"][field].pop(part)
    late = set(src["engine"].get("maturity_late", ()))
    src["engine"]["maturity_late"] = sorted(late - models)
    dst["engine"]["maturity_late"] = sorted(
        {*dst["engine"].get("maturity_late", ()), *late & models}
    )
    moved_rejected = [row for row in src["engine"]["rejected"] if row[0] in models]
    src["engine"]["rejected"] = [row for row in src["engine"]["rejected"] if row[0] not in models]
    counts = Counter({(m, r): c for m, r, c in dst["engine"]["rejected"]})
    for model_id, reason, count in moved_rejected:  # (rows of a model that was there before
        counts[model_id, reason] += count  # add up: one row per model and reason)
    dst["engine"]["rejected"] = [[m, r, c] for (m, r), c in counts.items()]
    # the models' waiting outcomes, and those the source has yet to read, wait in the target
    rows: list[tuple] = []
    for number, run in waiting_outcomes(source).items():
        kept = [row for row in run if row[1] not in models]
        if len(kept) < len(run):
            rows += [tuple(row[1:]) for row in run if row[1] in models]
            out_source[OUTCOME + pack(number)] = encode_value(kept) if kept else None
    rows += [tuple(outcome) for outcome in unread]
    if rows:
        # a run is kept sorted by (due, instance_id, model_id, arrival)
        rows.sort(key=lambda r: (r[7], r[1], r[0]))  # due is the eighth field
        first = dst.get("seq", 0) + 1
        out_target[OUTCOME + pack(first)] = encode_value(
            [(first + i, *row) for i, row in enumerate(rows)]
        )
        dst["seq"] = first + len(rows) - 1
    before = src.get("moved", [[], -1])
    src["moved"] = [sorted(set(before[0]) | models), max(before[1], until)]
    out_source[STAGE] = encode_value(src)
    out_target[STAGE] = encode_value(dst)
    return out_source, out_target


def summarize_eval(items: Items) -> dict[str, Any]:
    """The seal's summary of an evaluation partition's state (as EvalStage.summary)."""
    meta = decode_value(items[STAGE]) if STAGE in items else {}
    models, pairs = parts(items)
    shapes: list[dict[str, Any]] = []
    index: dict[bytes, int] = {}
    summary_models = {}
    for name, state in models.items():
        if not state["n"]:
            continue
        shape = model_shape_of(state["config"])
        key = orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)
        if key not in index:
            index[key] = len(shapes)
            shapes.append(shape)
        summary_models[name] = [state["n"], index[key]]
    waiting = sum(len(run) for run in waiting_outcomes(items).values())
    maturity = {owner_of(k) for k in items if k[:1] == MATURITY}
    pending = sorted(maturity - {m for m, s in models.items() if s["n"]})
    return {
        "offset": meta.get("offset", -1),
        "applied": meta.get("applied", []),
        "waiting": waiting,
        "models": summary_models,
        **({"pending_models": pending} if pending else {}),
        "pairs": {
            k: [s["n"], s["model_a"], s["model_b"], list(s["estimators"])]
            for k, s in pairs.items()
            if s["n"]
        },
        "shapes": shapes,
    }


def apply(items: Items, changes: Changes) -> dict[bytes, bytes]:
    """``items`` after ``changes`` (for the summary of the checkpoint that writes them)."""
    out = dict(items)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
