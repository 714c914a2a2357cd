"""The disk store gives the join exactly what the in-memory state gives it."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from streameval.app.changelog_format import Restorer, checkpoint_records
from streameval.core.join import Join
from streameval.core.outcome import INSTANCE, LABEL, PREDICTION
from streameval.core.pending import queue_entries
from streameval.store import DiskState

_events = st.lists(
    st.tuples(
        st.sampled_from([INSTANCE, PREDICTION, PREDICTION, LABEL]),
        st.sampled_from([f"i{i}" for i in range(12)]),
        st.sampled_from(["m", "n"]),
        st.integers(0, 80),  # ts
        st.sampled_from(["a", "b", 7]),
        st.integers(-5, 40),  # how far the clock is behind it when it arrives
        st.sampled_from([None, None, None, "checkpoint", "restart"]),
    ),
    max_size=60,
)


def _row(kind, iid, model, ts, label, n):
    """The n-th event as the join takes it; two predictions of three have scores, which the
    stores keep with them."""
    scores = None
    if kind == PREDICTION and n % 3:
        scores = ("a", 0.25, "b", 0.75) if label != 7 else (7, 1.0)
    return (kind, iid, model if kind == PREDICTION else "", ts, label, 0, n, scores)


@settings(max_examples=150, deadline=None)
@given(
    events=_events,
    grace=st.integers(0, 10),
    ttl=st.integers(1, 80),
    max_pending=st.integers(1, 6),
    budget=st.sampled_from([None, 1, 2]),
)
def test_disk_and_memory_states_give_the_same_outcomes(
    tmp_path_factory, events, grace, ttl, max_pending, budget
):
    """The same events through a join in RAM and a join on RocksDB — with checkpoints (the
    store's batch written) and restarts (the store reopened from disk), also between the
    steps of a clock that passes more waiting events than its ``budget`` — give the same
    outcomes, counters and checkpoint changes."""
    path = tmp_path_factory.mktemp("store")
    memory = Join(grace, ttl, max_pending)
    disk = Join(grace, ttl, max_pending, DiskState(path, cache_mb=1, cache_entries=3))
    got, want, clock = [], [], 0
    for n, (kind, iid, model, ts, label, behind, action) in enumerate(events):
        if behind > 10:  # else the clock stays: waiting events pile up
            clock = max(clock, ts - behind + 10)
        row = _row(kind, iid, model, ts, label, n)
        want += memory.add_events([row], clock, budget=budget)[0]
        got += disk.add_events([row], clock, budget=budget)[0]
        if action is not None:
            expected = memory.changes()
            changes = disk.changes()
            assert changes == expected
            memory.commit()
            disk.commit(changes, n, (n, 1))
            if action == "restart":  # from what the disk holds
                disk.state.close()
                state = DiskState(path, cache_mb=1, cache_entries=3)
                disk = Join.resume(_meta(state), state, state.waiting())
                assert disk.behind == memory.behind and disk.waiting == memory.waiting
        while memory.behind:
            want += memory.advance(clock, budget=budget)
            got += disk.advance(clock, budget=budget)
        assert not disk.behind
    want += memory.advance(10**6)
    got += disk.advance(10**6)
    assert got == want
    assert disk.counters == memory.counters
    assert disk.pending == memory.pending
    disk.state.close()


def _meta(state):
    from streameval.core.state import decode_value

    return decode_value(state.scalars()[b"m"])


@settings(max_examples=60, deadline=None)
@given(events=_events, cut=st.integers(0, 400))
def test_a_store_rebuilt_from_its_changelog_is_the_store(tmp_path_factory, events, cut):
    """Checkpoints written as changelog records, read back into an empty disk store (what
    a worker taking the partition over does), give the state of the last sealed one — also
    when a crash cut the last checkpoint short."""
    join = Join(3, 50, 5)
    log, number, chunks, sealed_at = [], 0, 0, None
    for n, (kind, iid, model, ts, label, behind, action) in enumerate(events):
        join.add_events([_row(kind, iid, model, ts, label, n)], max(0, ts - behind))
        if action is not None:
            records, new_chunks = checkpoint_records(number + 1, join.changes(), chunks, {})
            log += records
            join.commit()
            number, chunks = number + 1, new_chunks
            sealed_at = (len(log), {k: list(v) for k, v in join.state.records.items()})
    if sealed_at is None:
        return
    log = log[: max(cut, sealed_at[0])]  # whatever came after the last seal may be cut off
    path = tmp_path_factory.mktemp("rebuilt")
    state = DiskState(path)
    entries = lambda record: queue_entries(record, 50)  # noqa: E731
    restorer = Restorer(sink=lambda items: state.apply(items, entries), lookup=state.get_many)
    for key, value in log:
        restorer.add(key, value)
    intent = restorer.finish()
    state.apply(list(intent.items()), entries)
    state.settle(len(log), (number, chunks))
    assert dict(state) == sealed_at[1]
    assert state.pending_count() == len(sealed_at[1])
    state.close()


def _database(state: DiskState) -> tuple[dict, dict, set]:
    """What a disk store's database holds: records, remembered instances, queue keys."""
    from streameval.core.pending import PREDICTIONS
    from streameval.core.state import MEMORY, RECORD, decode_value, intern_record

    records, memory, queues = {}, {}, set()
    it = state.db.iter()
    it.seek_to_first()
    while it.valid():
        key = it.key()
        if key[:1] == RECORD:
            records[key[1:].decode()] = intern_record(decode_value(it.value()), PREDICTIONS)
        elif key[:1] == MEMORY:
            memory[key[1:].decode()] = tuple(decode_value(it.value()))
        elif key[:1] in (b"x", b"f"):
            queues.add(key)
        it.next()
    return records, memory, queues


def _queue_keys(records: dict, memory: dict, ttl: int) -> set:
    """The time-queue keys a database of these records and remembered instances must hold."""
    from streameval.core.state import time_key

    keys = {time_key(b"x", t, i) for i, r in records.items() for _, t in queue_entries(r, ttl)}
    return keys | {time_key(b"f", until + 1, i) for i, (_, until) in memory.items()}


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from([INSTANCE, PREDICTION, PREDICTION, LABEL]),
            st.sampled_from([f"i{i}" for i in range(12)]),
            st.sampled_from(["m", "n"]),
            st.integers(0, 80),
            st.sampled_from(["a", "b", 7]),
            st.integers(-5, 40),
            st.sampled_from([None, None, "cut", "cut", "prepare", "written", "crash"]),
        ),
        max_size=60,
    ),
    ttl=st.integers(1, 80),
    max_pending=st.integers(1, 6),
)
def test_a_checkpoint_written_while_the_join_goes_on(tmp_path_factory, events, ttl, max_pending):
    """The worker cuts a checkpoint, goes on, and writes the cut's batch once Kafka has it:
    the join's outcomes are those of a join that stops for each checkpoint, the database
    holds exactly the state at the cut written last (its time queues those of its records),
    and a crash with a cut not yet written leaves the database at the one before — whether
    or not its batch was prepared (built while the join went on, before it was written)."""
    path = tmp_path_factory.mktemp("cuts")
    memory = Join(2, ttl, max_pending)
    disk = Join(2, ttl, max_pending, DiskState(path, cache_mb=1, cache_entries=3))
    cut, at_cut, at_written, clock = None, None, ({}, {}), 0
    got, want = [], []
    for n, (kind, iid, model, ts, label, behind, action) in enumerate(events):
        clock = max(clock, ts - behind)
        row = _row(kind, iid, model, ts, label, n)
        want += memory.add_events([row], clock)[0]
        got += disk.add_events([row], clock)[0]
        assert got == want
        if action == "cut" and cut is None:
            changes = disk.changes()
            assert changes == memory.changes()
            cut = disk.freeze(changes)
            memory.commit()
            at_cut = (
                {i: list(r) for i, r in memory.state.records.items()},
                dict(memory.state.memory),
            )
        elif action == "prepare" and cut is not None:
            disk.prepare(cut)
        elif action == "written" and cut is not None:
            disk.written(cut, n, (n, 1))
            cut, at_written = None, at_cut
            records, remembered, queues = _database(disk.state)
            assert (records, remembered) == at_written
            assert queues == _queue_keys(records, remembered, ttl)
        elif action == "crash":  # the cut not written is lost: back to the last one written
            disk.state.close()
            state = DiskState(path, cache_mb=1, cache_entries=3)
            records, remembered, queues = _database(state)
            assert (records, remembered) == at_written
            if state.scalars():
                disk = Join.resume(_meta(state), state, state.waiting())
                memory = Join.restore(state.items())
            else:  # nothing written yet
                disk = Join(2, ttl, max_pending, state)
                memory = Join(2, ttl, max_pending)
            cut, clock = None, 0
    want += memory.advance(10**6)
    got += disk.advance(10**6)
    assert got == want
    assert disk.counters == memory.counters
    disk.state.close()


def _stamp(state: DiskState, **fields) -> None:
    """Rewrite the store's own scalars as another release would have left them."""
    from streameval.core.state import decode_value, encode_value
    from streameval.store import _LOCAL

    local = decode_value(state.db.get(_LOCAL))
    local.update(fields)
    state.db[_LOCAL] = encode_value(local)


def test_which_stores_a_worker_reads_on_and_which_it_rebuilds(tmp_path):
    """An empty store and one of the format before chunked waiting events (1) are read on; a
    format this release does not know, or other join rules, are rebuilt, saying why."""
    from streameval.store import FORMAT

    state = DiskState(tmp_path / "s", fingerprint="rules-a", accept=("rules-old",))
    assert state.usable() == (True, "empty")
    state.commit({}, position=7)
    assert state.usable() == (True, "ok")
    _stamp(state, format=1)
    assert state.usable() == (True, "ok")
    assert state.position == 7
    _stamp(state, format=FORMAT + 1)
    assert state.usable() == (False, f"format {FORMAT + 1}, this worker writes {FORMAT}")
    _stamp(state, format=FORMAT, fingerprint="rules-old")
    assert state.usable() == (True, "ok")
    _stamp(state, fingerprint="rules-b")
    assert state.usable() == (False, "written under other join rules")
    state.close()


def test_a_store_records_its_checkpoint_s_lineage_where_an_earlier_release_does_not_look(
    tmp_path,
):
    """The checkpoint a store holds is its number, intent chunks and lineage; the first two
    stay where a release before lineages reads them, and a store that release wrote has no
    lineage (so no check of it: streameval.app.changelog_format.descends)."""
    from streameval.app.changelog_format import Sealed, descends
    from streameval.core.state import encode_value
    from streameval.store import _LOCAL

    state = DiskState(tmp_path / "s", fingerprint="rules-a")
    state.commit({}, position=7, sealed=Sealed(3, 0, "a1"))
    assert state.sealed == (3, 0, "a1")
    assert state._local()["sealed"] == [3, 0]
    _stamp(state, sealed=[4, 1])  # an earlier release wrote a checkpoint since: it has none
    assert state.sealed == (4, 1, None)
    _stamp(state, sealed=[5, 0], lineage="not a pair")  # whatever it is, not this one's
    assert state.sealed == (5, 0, None)
    local = {**state._local(), "sealed": [4, 1]}
    del local["lineage"]  # as a release before lineages left it
    state.db[_LOCAL] = encode_value(local)
    assert Sealed(*state.sealed) == Sealed(4, 1, None)
    assert descends(None, Sealed(*state.sealed))
    state.close()


class _OrderedKeys:
    """An ordered key space as a TimeQueue uses RocksDB (``iter`` a snapshot): fast enough for
    thousands of hypothesis cases; the real database runs fewer of them."""

    def __init__(self) -> None:
        self.keys: set[bytes] = set()

    def iter(self):
        return _Cursor(sorted(self.keys))

    def write(self, puts, deletes) -> None:
        from streameval.core.state import time_key

        self.keys -= {time_key(b"x", *e) for e in deletes}
        self.keys |= {time_key(b"x", *e) for e in puts}

    def entries(self) -> set:
        from streameval.core.state import split_time_key

        return {split_time_key(k) for k in self.keys}


class _Cursor:
    def __init__(self, keys: list[bytes]) -> None:
        self.keys, self.at = keys, 0

    def seek(self, key: bytes) -> None:
        import bisect

        self.at = bisect.bisect_left(self.keys, key)

    def valid(self) -> bool:
        return self.at < len(self.keys)

    def key(self) -> bytes:
        return self.keys[self.at]

    def next(self) -> None:
        self.at += 1


class _RealKeys:
    """The same over a RocksDB database, as the disk store opens it."""

    def __init__(self, path: str) -> None:
        from rocksdict import Options, Rdict

        self.db = Rdict(path, Options(raw_mode=True))

    def iter(self):
        return self.db.iter()

    def write(self, puts, deletes) -> None:
        from rocksdict import WriteBatch
        from streameval.store_queues import TimeQueue

        batch = WriteBatch(raw_mode=True)
        TimeQueue.write(batch, b"x", puts, deletes)
        self.db.write(batch)

    def entries(self) -> set:
        from streameval.core.state import split_time_key

        out, it = set(), self.db.iter()
        it.seek_to_first()
        while it.valid():
            out.add(split_time_key(it.key()))
            it.next()
        return out


_QUEUE_OPS = st.lists(
    st.tuples(
        st.sampled_from("push push push discard pop peek freeze written refreeze reread".split()),
        st.integers(0, 2),  # t
        st.sampled_from(["a", "b"]),
    ),
    max_size=40,
)


def _run_queue(keys, ops) -> None:
    """Drive a TimeQueue over ``keys`` with ``ops`` against a model: the set of live entries
    (the join pushes only an entry that is not live, and discards only one that is)."""
    from streameval.store_queues import TimeQueue

    queue, live, frozen, at_freeze = TimeQueue(keys, b"x"), set(), None, set()
    for op, t, instance_id in ops:
        entry = (t, instance_id)
        if op == "push" and entry not in live:
            queue.push(t, instance_id)
            live.add(entry)
        elif op == "discard" and entry in live:
            queue.discard(t, instance_id)
            live.discard(entry)
        elif op == "pop" and live:
            assert queue.pop() == min(live)
            live.discard(min(live))
        elif op == "peek":
            assert queue.peek() == min(live, default=None)
        elif op in ("freeze", "refreeze") and (frozen is None or op == "refreeze"):
            # refreeze: the batch out is dropped (never written) and another is cut
            frozen, at_freeze = queue.freeze(), set(live)
            puts, deletes = frozen
            assert puts | (keys.entries() - deletes) == at_freeze
            if op == "freeze":  # no tombstone for a key never written
                assert deletes <= keys.entries()
        elif op == "written" and frozen is not None:
            keys.write(*frozen)
            queue.written(*frozen)
            frozen = None
            assert keys.entries() == at_freeze
            assert not queue.cancelled and not queue._frozen
            assert queue.fresh <= live and queue.shadowed <= live
        elif op == "reread":  # RAM forgotten: what the database holds is the queue
            queue.reread()
            live, frozen = keys.entries(), None
        assert len(queue.heap) == len(set(queue.heap)), "an entry twice in RAM"
        assert queue.queued == set(queue.heap)
    while live:  # everything live comes out once, in order, and nothing else
        assert queue.pop() == min(live)
        live.discard(min(live))
    assert queue.peek() is None


_B1 = [("push", 0, "b"), ("push", 1, "a"), ("discard", 1, "a"), ("push", 1, "a"), ("pop", 0, "a"),
       ("pop", 0, "a"), ("freeze", 0, "a"), ("written", 0, "a")]  # fmt: skip
_P1 = [("push", 1, "a"), ("freeze", 0, "a"), ("written", 0, "a"), ("freeze", 0, "a"),
       ("pop", 0, "a"), ("push", 1, "a"), ("written", 0, "a"), ("pop", 0, "a")]  # fmt: skip
_P3 = [("push", 1, "a"), ("freeze", 0, "a"), ("written", 0, "a"), ("pop", 0, "a"),
       ("freeze", 0, "a"), ("push", 1, "a"), ("written", 0, "a"), ("discard", 1, "a"),
       ("freeze", 0, "a")]  # fmt: skip
#: discarded after a freeze, its batch dropped for another, pushed again: one copy, not two
_R1 = [("push", 0, "a"), ("freeze", 0, "a"), ("discard", 0, "a"), ("refreeze", 0, "a"),
       ("push", 0, "a"), ("written", 0, "a")]  # fmt: skip


@settings(max_examples=3000, deadline=None)
@given(ops=_QUEUE_OPS)
@example(ops=[("push", 1, "a"), ("discard", 1, "a"), ("freeze", 0, "a")])
@example(ops=_B1)
@example(ops=_P1)
@example(ops=_P3)
@example(ops=_R1)
def test_a_time_queue_is_its_live_entries_and_deletes_only_what_was_written(ops):
    """Pushes, discards and pops between freezes and writes of their batches, a batch dropped
    for another, RAM forgotten: the queue gives the live entries in order, each once; a batch
    brings the database to the live entries at its freeze; and it deletes only keys the
    database has — an entry pushed and discarded between two freezes leaves nothing on disk,
    not even a tombstone."""
    _run_queue(_OrderedKeys(), ops)


@settings(max_examples=100, deadline=None)
@given(ops=_QUEUE_OPS)
@example(ops=_B1)
@example(ops=_R1)
def test_a_time_queue_on_rocksdb_is_its_live_entries(tmp_path_factory, ops):
    """The same over RocksDB: its iterators, seeks and batches behave as the model's."""
    keys = _RealKeys(str(tmp_path_factory.mktemp("queue") / "db"))
    try:
        _run_queue(keys, ops)
    finally:
        keys.db.close()
