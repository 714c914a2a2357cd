"""Write docs/examples/sample-events.jsonl: a small, deterministic stream to replay.

Three binary models (a champion, a challenger and a weak baseline) score instances of a stream
whose labels have temporal dependence; each model predicts when the instance arrives and
re-predicts while the label is pending (its later predictions are a little better); labels
arrive 0.5–20 s later (exponential), sometimes before a model's prediction has been delivered;
at instance 1200 the champion's concept drifts and its error rate jumps. The champion and the
challenger send their probabilities (``scores``) with every prediction, the baseline does not.
A few malformed lines show how replay reports them. Lines are in delivery order, as a consumer
would see them.

Run: python docs/examples/make_sample_events.py [OUT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

N_INSTANCES = 2000
DRIFT_AT = 1200
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
#: the models whose predictions carry scores
SCORED = ("champion", "challenger")
MODELS = {  # model: (accuracy before the drift, after it)
    "champion": (0.86, 0.55),
    "challenger": (0.82, 0.80),
    "baseline": (0.65, 0.65),
}


def generate(seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    confidences = np.random.default_rng(seed + 1)  # its own draws: the rest is as before
    arrivals: list[tuple[float, int, dict]] = []  # (delivery time, tie-break, event)
    label = "no"
    for i in range(N_INSTANCES):
        if rng.random() < 0.15:  # labels persist: temporal dependence
            label = "yes" if label == "no" else "no"
        ts = START_MS + i * 250
        instance_id = f"inst-{i:05d}"
        delay = int(500 + rng.exponential(4_000))
        t_label = ts + min(delay, 20_000)
        arrivals.append(
            (ts, len(arrivals), {"type": "instance", "instance_id": instance_id, "ts": ts})
        )
        for model, (before, after) in MODELS.items():
            accuracy = before if (i < DRIFT_AT or model != "champion") else after
            times = [ts, *sorted(rng.integers(ts + 1, t_label + 1, rng.integers(0, 3)).tolist())]
            for step, t in enumerate(times):
                p = min(0.98, accuracy + 0.04 * step)  # re-predictions know a little more
                predicted = label if rng.random() < p else ("yes" if label == "no" else "no")
                transport = rng.exponential(300)  # delivery lag of the predictions topic
                event = {
                    "type": "prediction",
                    "instance_id": instance_id,
                    "model_id": model,
                    "ts": int(t),
                    "label": predicted,
                    "model_version": "1",
                }
                if model in SCORED:  # more confident when right, as a useful model is
                    right = predicted == label
                    c = round(float(confidences.beta(6, 2) if right else confidences.beta(3, 2)), 3)
                    c = max(c, 0.5)
                    other = "yes" if predicted == "no" else "no"
                    event["scores"] = {predicted: c, other: round(1.0 - c, 3)}
                arrivals.append((t + transport, len(arrivals), event))
        arrivals.append(
            (
                t_label,
                len(arrivals),
                {"type": "label", "instance_id": instance_id, "ts": t_label, "label": label},
            )
        )
    arrivals.sort(key=lambda a: (a[0], a[1]))
    lines = [json.dumps(event, separators=(",", ":")) for _, _, event in arrivals]
    # a few broken records, as a real topic has now and then
    lines.insert(100, '{"type": "prediction", "instance_id": "inst-00010", "model_id": "champion"')
    lines.insert(2000, '{"type": "label", "instance_id": "inst-00300", "ts": 1767225675000}')
    lines.insert(4000, '{"type": "feedback", "instance_id": "inst-00600", "ts": 1767225750000}')
    return lines


def main() -> None:
    out = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("sample-events.jsonl")
    )
    out.write_text("\n".join(generate()) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
