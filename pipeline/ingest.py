"""The ingest step: decode a batch of input messages, dead-letter the malformed ones."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.schemas import BatchDecoder, DecodedBatch, Message

__all__ = ["ingest"]


def ingest(
    decoder: BatchDecoder, producer: Any, messages: Iterable[Message], dead_letter_topic: str
) -> DecodedBatch:
    """Decode ``messages``; send every malformed one to ``dead_letter_topic`` unchanged
    (original key and bytes, cut to the first MiB if longer) with headers naming its source
    topic, partition, offset and the reason. ``producer`` is a confluent_kafka.Producer;
    delivery is the caller's to flush."""
    batch = decoder.decode(messages)
    for letter in batch.dead_letters:
        producer.produce(
            dead_letter_topic, value=letter.payload(), key=letter.key, headers=letter.headers()
        )
    return batch
