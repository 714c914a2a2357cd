"""How the worker's stages connect — route → join → evaluate — as plain rules, no Kafka.

The router sends each event to the join partition of its instance
(:func:`~streameval.core.join.join_partition`); a join step sends its outcomes to the
evaluation partition of their model (:func:`model_partitioner`), and its clock, the
*frontier*, to every evaluation partition when it moved (:meth:`Topology.after_batch`,
:meth:`Topology.after_step`). The runner, the stage tests and ``benchmarks/stages.py`` all
drive these rules, so what the tests prove is what the worker does.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from streameval.config import EvaluationConfig
from streameval.core.outcome import Outcome

from .join_stage import JoinStage
from .wire import OutcomeBatch

__all__ = ["Topology", "model_partitioner"]


def model_partitioner(config: EvaluationConfig, partitions: int) -> Callable[[str], int]:
    """The evaluation partition of a model. Models compared with each other (the configured
    pairs, transitively) share one partition, so a comparison sees both models' outcomes.

    >>> from streameval.config import load_config
    >>> config = load_config(comparisons=[{"a": "champion", "b": "challenger"}])
    >>> part = model_partitioner(config, 6)
    >>> part("champion") == part("challenger")
    True
    """
    parent: dict[str, str] = {}

    def find(m: str) -> str:
        while parent.get(m, m) != m:
            m = parent[m]
        return m

    for pair in config.comparisons:
        a, b = find(pair.a), find(pair.b)
        if a != b:
            parent[max(a, b)] = min(a, b)
    cache: dict[str, int] = {}

    def partition(model_id: str) -> int:
        p = cache.get(model_id)
        if p is None:
            p = cache[model_id] = zlib.crc32(find(model_id).encode()) % partitions
        return p

    return partition


class Topology:
    """The evaluation side of the worker's glue: which evaluation partition gets what a join
    step resolved.

    >>> from streameval.config import load_config
    >>> topology = Topology(load_config(), eval_partitions=3)
    >>> topology.partition_of("m") in range(3)
    True
    """

    def __init__(self, config: EvaluationConfig, eval_partitions: int) -> None:
        self.eval_partitions = eval_partitions
        self.partition_of = model_partitioner(config, eval_partitions)

    def after_batch(
        self, stage: JoinStage, before: tuple[int, int], outcomes: list[Outcome]
    ) -> list[tuple[int, OutcomeBatch]]:
        """What a join stage sends after applying an event batch: ``before`` is its
        ``(frontier, join.clock)`` from before it; the frontier goes out if either moved."""
        moved = (stage.frontier, stage.join.clock) != before
        return self._fan_out(stage, outcomes, moved)

    def after_step(
        self, stage: JoinStage, clock_before: int, outcomes: list[Outcome]
    ) -> list[tuple[int, OutcomeBatch]]:
        """What a join stage sends after a :meth:`~JoinStage.proceed` step: the frontier goes
        to every evaluation partition with the last step only (fewer, larger releases there);
        a step's own outcomes always go where they belong."""
        moved = not stage.behind and stage.join.clock != clock_before
        return self._fan_out(stage, outcomes, moved)

    def _fan_out(
        self, stage: JoinStage, outcomes: list[Outcome], moved: bool
    ) -> list[tuple[int, OutcomeBatch]]:
        per_eval: dict[int, list[Outcome]] = {}
        partition_of = self.partition_of
        for outcome in outcomes:
            per_eval.setdefault(partition_of(outcome.model_id), []).append(outcome)
        return [
            (r, stage.batch(per_eval.get(r, [])))
            for r in range(self.eval_partitions)
            if moved or r in per_eval
        ]
