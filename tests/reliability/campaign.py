"""A fault campaign against real workers and a broker of its own, compared with replay.

Traffic (tests/reliability/traffic.py) is produced at a steady rate while a plan of faults
runs: worker SIGKILLs at random moments, graceful and ungraceful rebalances (2 → 1 → 2 → 3
workers), SIGKILL of the broker and its restart in place, the broker unreachable when a
worker starts and for a stretch mid-run, an output topic deleted under running workers, and
SIGTERM in each of those states. Each worker slot keeps its own state directory (a restart
finds its disk, as on a machine of its own). At the end the campaign checks what the project
promises (:meth:`Campaign.verdict`):

* the final metrics, comparisons and alarms equal ``streameval replay``'s of the same lines,
  so ``n`` per model too: nothing lost, nothing counted twice;
* no worker stopped on its own except where a fault says it must (a deleted output topic,
  saying so), and none that was restarted stopped again: no crash loop;
* every SIGTERM ended its worker within ``shutdown_timeout_s`` (and a margin for Python's
  start and exit), with status 0 — or 1 for a worker that had just been refused a record of
  its deleted output topic and said so (:func:`clean`);
* that the broker outage did put workers out of their group (the path that purges what they
  had not sent);
* how many published records a ``read_committed`` reader sees twice: identical copies under
  ``at_least_once``; none under ``exactly_once``, the default;
* where the outcomes went (:meth:`Campaign.trace`): each (model, instance) on the internal
  outcomes topic against replay's, and for the first instances with one missing, their
  events, dead letters and join changelog records — so that a campaign whose numbers differ
  says at which stage.

``python -m tests.reliability.campaign`` runs it at full size, then a plan of broker restarts
short enough for the workers to stay in their group (their inputs look quiet meanwhile and
must not be taken for idle), then the first plan under exactly-once, and prints the table of
faults and numbers compared of each (``make soak``); tests/reliability/test_campaign.py runs
reduced plans of the first and the last.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.integration.test_worker import Deployment
from tests.reliability.traffic import MAX_LAG_MS, Traffic
from tests.streaming import finals, replay_finals

CONFIG = """
publish_every = 2000
[join]
label_grace_ms = 1000
[models.scorer-a]
[models.scorer-b]
[models.triage]
[[comparisons]]
a = "scorer-a"
b = "scorer-b"
[worker]
processing_guarantee = "{guarantee}"
idle_ms = {idle_ms}
snapshot_interval_s = 0.3
checkpoint_max_changes = 5000
publish_interval_s = 0.5
session_timeout_ms = {session_timeout_ms}
shutdown_timeout_s = 15
"""
SHUTDOWN_TIMEOUT_S = 15.0
#: How long a worker may take to its first "assigned:": under exactly-once a restore first
#: waits for the transactions open on its partitions to end, up to transaction_timeout_ms
#: (60 s) and the broker's 10 s to notice — after a broker outage, a transaction of a worker
#: stopped while Kafka was away can hold it that long (docs/operations.md, "Exactly-once"); one
#: still open 15 s after the timeout hangs, and waits for the campaign to abort it (the wait
#: is then extended)
ASSIGN_WAIT_S = 150.0
#: what a worker says when Kafka refuses one of its records (a deleted output topic)
REFUSALS = ("was the topic deleted?", "Kafka did not acknowledge a message the worker produced")
EXIT_MARGIN_S = 10.0  # Python's start-up and exit, Faust's service teardown
#: a worker's log line for a wait at assignment (streameval.app.rebalance.SLOW_WAIT_S)
WAITED = re.compile(r"waited (\d+\.\d) s for the (?:group's offsets|transactions open)")
#: the broker's log line for a transaction it aborted because it outlived its timeout
ROLLED_BACK = re.compile(r"ongoing transaction for transactionalId (\S+) due to timeout")
#: what a worker says of a commit that failed: Kafka aborted it (the loop, a revocation), or
#: it failed as its partitions went
FAILED_COMMITS = ("Kafka aborted the worker's", "the commit on its way when")
#: what a worker says when it replaces a producer left in a hung send_offsets_to_transaction
HUNG = "(librdkafka #5456, #5511). A new producer takes the same transactional id"
assert MAX_LAG_MS < 1000  # the grace above: an overtaken prediction still joins


@dataclass
class Fault:
    """One fault injected: what, when (seconds into the campaign), and what came of it."""

    kind: str
    at: float
    detail: str = ""


@dataclass
class Plan:
    """How big a campaign is; the order of its faults is fixed (:meth:`Campaign.run`)."""

    instances: int = 20_000
    seconds: float = 150.0  # over which the traffic is produced
    kills: int = 20  # worker SIGKILLs at random moments (at least)
    outage_s: float = 30.0  # the broker unreachable mid-run
    seed: int = 3
    broker_faults: bool = True  # the broker killed, restarted, unreachable
    topic_faults: bool = True  # an output topic deleted
    #: > 0: instead of the faults above, that many broker restarts short enough for the
    #: workers to stay in their group (``session_timeout_ms`` of a minute) while their inputs
    #: turn idle after a second, as they would in production
    blips: int = 0
    #: the workers' processing_guarantee (the worker's default is exactly_once)
    guarantee: str = "at_least_once"

    def config(self) -> str:
        g = self.guarantee
        if self.blips:
            return CONFIG.format(idle_ms=1000, session_timeout_ms=60_000, guarantee=g)
        return CONFIG.format(idle_ms=8000, session_timeout_ms=6000, guarantee=g)


@dataclass
class Slot:
    """A worker's place: its state directory and the process running there now."""

    name: str
    state: Path
    process: subprocess.Popen | None = None
    log: Path | None = None
    #: set when a fault is expected to stop it on its own (a deleted output topic)
    may_stop: bool = False
    restarts_after_own_stop: int = 0


@dataclass
class _Hanging:
    """The campaign's operator for hanging transactions (:meth:`Campaign.end_hanging`)."""

    checked: float = float("-inf")  # when the workers' logs were last looked at
    handled: int = 0  # the workers' errors about one answered
    empty: int = 0  # find-hanging listed none this many times in a row


@dataclass
class Campaign:
    root: Path
    plan: Plan
    log: object = print
    faults: list[Fault] = field(default_factory=list)
    terms: list[tuple[str, float, int | None, bool]] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from streameval.config import load_config
        from streameval.devkafka import KafkaInstance

        self.traffic = Traffic(instances=self.plan.instances, seed=self.plan.seed)
        self.rng = random.Random(self.plan.seed)
        self.broker = KafkaInstance.start(self.root / "kafka", tie_to_parent=True)
        (self.root / "campaign.toml").write_text(self.plan.config())
        self.config = load_config(self.root / "campaign.toml")
        self.deployment = Deployment(
            self.broker.bootstrap, self.root, self.traffic, self.plan.config()
        )
        self.deployment.producer = None  # (its librdkafka would complain of every outage)
        self.slots = [Slot(f"w{k}", self.root / f"state-{k}") for k in range(4)]
        self.t0 = time.monotonic()
        self._produced = 0
        self._traffic_done = threading.Event()
        self._traffic_error: BaseException | None = None
        self._hanging = _Hanging()

    # -- the parts ---------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, kind: str, detail: str = "") -> None:
        self.faults.append(Fault(kind, round(self.now(), 1), detail))
        self.log(f"[{self.now():7.1f} s] {kind} {detail}")

    def start(self, slot: Slot) -> None:
        self.deployment.env["STREAMEVAL_STATE_DIR"] = str(slot.state)
        self.deployment.start_worker()
        slot.process, _, slot.log = self.deployment.workers[-1]

    def alive(self) -> list[Slot]:
        return [s for s in self.slots if s.process is not None and s.process.poll() is None]

    def kill(self, slot: Slot) -> None:
        assert slot.process is not None
        slot.process.send_signal(signal.SIGKILL)
        slot.process.wait()
        slot.process = None

    def wait_line(self, slot: Slot, text: str, timeout: float = ASSIGN_WAIT_S) -> None:
        """Until the worker's log has ``text`` (it got that far)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if slot.log is not None and text in slot.log.read_text(errors="replace"):
                return
            if self.end_hanging():  # the worker goes on once it has ended
                deadline = max(deadline, time.monotonic() + 90.0)
            time.sleep(0.1)
        raise AssertionError(f"{slot.name} never logged {text!r}")

    def end_hanging(self) -> bool:
        """What a worker's error about a hanging transaction asks of an operator: abort
        each transaction ``kafka-transactions.sh find-hanging`` lists (whether it did).
        Such a transaction is the broker's fault (Kafka 4.4 skips a transaction's markers
        when it cannot find a partition's leader, as in the second after a restart when it
        fences itself), and no read_committed reader passes it until it is aborted. Looked
        for every 10 s."""
        from streameval.app.transactions import HANGING
        from streameval.devkafka import LauncherError

        hanging, now = self._hanging, time.monotonic()
        if now < hanging.checked + 10.0 or not self.broker.running():
            return False
        hanging.checked = now
        said = sum(log.read_text(errors="replace").count(HANGING)
                   for _, _, log in self.deployment.workers)  # fmt: skip
        if said <= hanging.handled:
            return False
        try:
            listed = self.broker.transactions(
                "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "1", timeout=60
            )
            # Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset ...: cells
            # padded with blanks, then a tab
            rows = [cells for line in listed.splitlines()[1:]
                    if len(cells := line.split()) >= 6 and cells[1].isdigit()
                    and cells[5].isdigit()]  # fmt: skip
            for topic, partition, *_, start in (cells[:6] for cells in rows):
                self.broker.transactions(
                    "abort", "--topic", topic, "--partition", partition, "--start-offset", start,
                    timeout=60,
                )  # fmt: skip
                self.note("hanging transaction aborted", f"{topic}[{partition}] from {start}")
        except (LauncherError, subprocess.TimeoutExpired) as err:  # the broker went away
            self.log(f"[{self.now():7.1f} s] hanging transactions not ended yet: {err}")
            return False  # (not an empty list: asked again in 10 s)
        hanging.empty = 0 if rows else hanging.empty + 1
        if rows or hanging.empty >= 3:  # ended, or another worker's error about the same
            hanging.handled = said
        return bool(rows)

    def term(self, slot: Slot, state: str, after: str = "assigned:") -> None:
        """SIGTERM once the worker's log has ``after``; how long it took to exit, and with
        what status."""
        assert slot.process is not None
        self.wait_line(slot, after)
        began = time.monotonic()
        slot.process.send_signal(signal.SIGTERM)
        try:
            code = slot.process.wait(SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S)
        except subprocess.TimeoutExpired:
            slot.process.kill()
            slot.process.wait()
            code = None
        took = time.monotonic() - began
        refused = any(said in slot.log.read_text()[-1500:] for said in REFUSALS)
        self.terms.append((state, took, code, refused))
        self.note("SIGTERM", f"{slot.name} ({state}): exit {code} after {took:.1f} s")
        slot.process = None

    def watch(self) -> None:
        """Workers that stopped on their own: expected after some faults (started again
        once), a defect otherwise."""
        for slot in self.slots:
            if slot.process is None or slot.process.poll() is None:
                continue
            code = slot.process.returncode
            tail = slot.log.read_text()[-1500:] if slot.log else ""
            refused = any(said in tail for said in REFUSALS)
            if not slot.may_stop or slot.restarts_after_own_stop or not refused:
                self.unexpected_exits.append(f"{slot.name} exit {code}:\n{tail}")
                slot.process = None
                continue
            self.note("stopped on its own", f"{slot.name} exit {code} (expected: {slot.may_stop})")
            slot.restarts_after_own_stop += 1
            self.start(slot)

    def pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.watch()
            self.end_hanging()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def produce(self) -> None:
        """The traffic, at a steady rate over ``plan.seconds`` (a thread); records the broker
        cannot take yet wait in the producer (it is idempotent: order kept through retries)."""
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.broker.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 20,
                "log_level": 0,  # the outages are on purpose
                "message.timeout.ms": 600_000,
                "queue.buffering.max.messages": 2_000_000,
                # back within a second of the broker, as the workers' inputs are taken for
                # idle after idle_ms (1 s in the blips plan) of quiet once Kafka answers:
                # librdkafka's default backoff grows to 10 s during an outage, and a source
                # that stays away longer than idle_ms is a late source, not the same stream
                "reconnect.backoff.max.ms": 500,
            }
        )
        records = list(self.traffic.records())
        rate = len(records) / self.plan.seconds
        prefix = self.deployment.prefix
        began = time.monotonic()
        failed: list[str] = []

        def delivered(err, _message) -> None:
            if err is not None:
                failed.append(str(err))

        try:
            for n, (topic, key, value) in enumerate(records):
                ahead = n / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
                while True:
                    try:
                        producer.produce(prefix + topic, value, key, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.1)
                producer.poll(0)
                self._produced = n + 1
            while producer.flush(10):
                pass
            assert not failed, failed[:3]
        except BaseException as err:
            self._traffic_error = err
        finally:
            self._traffic_done.set()

    # -- the faults --------------------------------------------------------------------
    def broker_down(self) -> None:
        self.broker.kill()

    def broker_up(self) -> None:
        self.broker.restart(tie_to_parent=True)

    def random_kills(self, count: int, spread: float) -> None:
        """``count`` SIGKILLs of random running workers, each followed by a restart in the
        same slot (its own disk), at random moments over about ``spread`` seconds."""
        for _ in range(count):
            self.pause(self.rng.uniform(0.2, 2 * spread / max(count, 1)))
            alive = self.alive()
            if not alive:
                continue
            victim = self.rng.choice(alive)
            self.kill(victim)
            self.note("SIGKILL worker", victim.name)
            if self.rng.random() < 0.3:
                self.pause(self.rng.uniform(0.0, 3.0))  # sometimes the group notices first
            self.start(victim)

    def run(self) -> None:
        if self.plan.blips:
            self.run_blips()
            return
        p = self.plan
        w = self.slots
        if p.broker_faults:  # a worker that starts while the broker is unreachable, and one
            self.broker_down()  # stopped then
            self.note("broker SIGKILL", "before any worker starts")
            self.start(w[0])
            self.start(w[3])
            self.pause(4)
            self.term(w[3], "broker unreachable at start", after="is not reachable")
            self.pause(4)
            self.broker_up()
            self.note("broker restarted", "in place")
        else:
            self.start(w[0])
        traffic = threading.Thread(target=self.produce, daemon=True)
        traffic.start()
        self.start(w[1])
        self.note("rebalance", "1 -> 2 workers")
        third = max(p.kills // 3, 1)
        self.random_kills(third, p.seconds * 0.15)
        # graceful and ungraceful rebalances: 2 -> 1 -> 2 -> 3
        self.term(w[1], "running, 2 workers")
        self.note("rebalance", "2 -> 1 (SIGTERM)")
        self.pause(3)
        self.start(w[1])
        self.note("rebalance", "1 -> 2")
        self.pause(3)
        self.start(w[2])
        self.note("rebalance", "2 -> 3")
        self.pause(3)
        self.kill(w[2])
        self.note("rebalance", "3 -> 2 (SIGKILL)")
        self.start(w[2])
        if p.broker_faults:  # the broker killed and restarted at once
            self.pause(2)
            self.broker_down()
            self.note("broker SIGKILL", "restarted at once")
            self.broker_up()
            self.note("broker restarted", "in place")
        self.random_kills(third, p.seconds * 0.15)
        if p.broker_faults:  # the broker unreachable for a while; a worker stopped meanwhile
            for slot in self.alive():
                self.wait_line(slot, "assigned:")
            self.broker_down()
            self.note("broker SIGKILL", f"unreachable for {p.outage_s:.0f} s")
            self.pause(p.outage_s / 2)
            victim = self.alive()[0]
            self.term(victim, "broker unreachable mid-run", after="")
            self.pause(p.outage_s / 2)
            self.broker_up()
            self.note("broker restarted", "in place")
            self.start(victim)
        if p.topic_faults:  # an output topic deleted under the running workers
            self.pause(3)
            self.delete_output_topic("metrics")
            self.pause(8)
            alive = self.alive()
            if alive:
                self.term(alive[0], "output topic deleted")
                self.start(alive[0])
            for slot in w:  # from here on a worker that stops by itself is a defect
                slot.may_stop = False
        self.random_kills(max(p.kills - 2 * third, 1), p.seconds * 0.15)
        for slot in w[:3]:
            if slot.process is None or slot.process.poll() is not None:
                self.start(slot)
        # the traffic ends; the last workers finish it
        while not self._traffic_done.wait(0.5):
            self.watch()
        if self._traffic_error is not None:
            raise self._traffic_error
        self.note("traffic done", f"{self._produced} records")

    def run_blips(self) -> None:
        """Two workers; the broker SIGKILLed and restarted in place every few seconds, each
        time back before the group gives up on the workers (no partition moves, no restore):
        while Kafka is gone the inputs look quiet, and must not be taken for idle."""
        w = self.slots
        self.start(w[0])
        self.start(w[1])
        traffic = threading.Thread(target=self.produce, daemon=True)
        traffic.start()
        for slot in w[:2]:
            self.wait_line(slot, "assigned:")
        for _ in range(self.plan.blips):
            self.pause(self.plan.seconds / (self.plan.blips + 1) / 2)
            self.broker_down()
            self.note("broker SIGKILL", "restarted at once, within the session timeout")
            self.broker_up()
            self.note("broker restarted", "in place")
        while not self._traffic_done.wait(0.5):
            self.watch()
        if self._traffic_error is not None:
            raise self._traffic_error
        self.note("traffic done", f"{self._produced} records")

    def delete_output_topic(self, base: str) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        topic = self.deployment.prefix + base
        admin.delete_topics([topic])[topic].result(30)
        for slot in self.slots:
            slot.may_stop = True
        self.note("output topic deleted", topic)

    # -- the verdict -------------------------------------------------------------------
    def finish(self, timeout: float = 300) -> dict:
        """Wait for the finals to reach replay's counts; return what the campaign found."""
        expected = replay_finals(self.traffic, self.config)
        want = {k: orjson.loads(v)["n"] for k, v in expected["metrics"].items()}
        deadline = time.monotonic() + timeout
        have: dict = {}
        got: dict = {}
        while time.monotonic() < deadline:
            self.watch()
            self.end_hanging()
            got = finals(self.deployment.records())
            have = {k: orjson.loads(v)["n"] for k, v in got["metrics"].items()}
            if have == want or any(have.get(k, 0) > n for k, n in want.items()):
                break
            time.sleep(1)
        records = self.deployment.raw_records()
        copies = sum(n - 1 for n in Counter(records).values() if n > 1)
        try:
            traced = self.trace()
        except Exception as err:  # a diagnosis that failed must not hide the verdict
            traced = {"outcomes_missing": -1, "outcomes_extra": -1, "extra": [],
                      "missing": [f"tracing the outcomes failed: {err!r}"]}  # fmt: skip
        for slot in self.alive():
            self.term(slot, "at the end")
        kills = sum(f.kind == "SIGKILL worker" for f in self.faults)
        kills += sum(f.kind == "rebalance" and "SIGKILL" in f.detail for f in self.faults)
        logs = [log.read_text(errors="replace") for _, _, log in self.deployment.workers]
        waits = [float(w) for text in logs for w in WAITED.findall(text)]
        return {
            "lost": sum(text.count("partitions lost") for text in logs),
            # the commits the workers saw fail (each said once: aborted by Kafka, or failed
            # while their partitions went), and the calls librdkafka left hung (said once,
            # where a new producer replaces the hung one)
            "aborted": sum(text.count(said) for text in logs for said in FAILED_COMMITS),
            "hung": sum(text.count(HUNG) for text in logs),
            "waits": waits,
            "timed_out": self.timed_out(),
            "equal": got == expected,
            "counts": (have, want),
            "mismatch": _mismatch(got, expected),
            "kills": kills,
            "faults": Counter(f.kind for f in self.faults),
            "terms": list(self.terms),
            "unexpected_exits": list(self.unexpected_exits),
            "records": len(records),
            "copies": copies,
            "compared": sum(len(v) for v in expected.values()),
            "outcomes": sum(want.values()),
            **traced,
        }

    def trace(self, most: int = 8) -> dict:
        """Where the outcomes went: every (model, instance) outcome on the outcomes topic as a
        ``read_committed`` reader sees it, against replay's (:func:`follow`)."""
        from streameval.topics import Topics

        from tests.streaming import outcomes_of

        d = self.deployment
        topics = Topics.with_prefix(d.prefix, d.prefix + "app")
        expected = Counter((o.model_id, o.instance_id) for o in outcomes_of(
            list(self.traffic.lines()), self.config))  # fmt: skip
        return follow(
            expected,
            d.read([topics.outcomes]),
            lambda: d.read([topics.events, topics.dead_letters, topics.join_changelog]),
            topics,
            most,
        )

    def timed_out(self) -> list[str]:
        """The transactions the broker rolled back because they outlived
        transaction_timeout_ms, each named by the slot whose process held its id ("w1/0":
        slot w1, producer-0) — what readers of their partitions waited for."""
        owners = {}
        for slot in self.slots:
            for path in slot.state.glob("*/producer-*.id"):
                k = path.stem.removeprefix("producer-")
                owners[f"{path.parent.name}-{path.read_text().strip()}"] = f"{slot.name}/{k}"
        try:
            text = self.broker.log_file.read_text(errors="replace")
        except OSError:
            return []
        return [owners.get(t, t) for t in ROLLED_BACK.findall(text)]

    def close(self) -> None:
        self.deployment.kill_all()
        self.broker.stop()


def conduct(root: Path, plan: Plan, log=print) -> tuple[Campaign, dict]:
    """Run a campaign to its verdict, and stop everything it started whatever happens."""
    campaign = Campaign(root, plan, log)
    try:
        campaign.run()
        return campaign, campaign.finish()
    finally:
        campaign.close()


def follow(
    expected: Counter,
    outcomes: list[tuple[str, int, int, bytes, bytes]],
    read_the_rest: Any,
    topics: Any,
    most: int = 8,
) -> dict:
    """Each (model, instance) outcome of ``outcomes`` (the outcomes topic's messages: topic,
    partition, offset, key, value) counted against ``expected`` (replay's). Under
    exactly-once each is there once. The ``most`` first instances with one missing are
    followed back through the messages of the events topic, the dead letters and the join
    changelog (``read_the_rest()``, read only then), so that a failed campaign says at which
    stage an instance was lost and which processes' logs to read; the first outcomes there
    more often than in replay are described with the batches that carried them."""
    from streameval.app.changelog_format import STATE
    from streameval.app.wire import decode_events, decode_outcomes
    from streameval.core.outcome import INSTANCE, LABEL, PREDICTION
    from streameval.core.state import MEMORY, RECORD

    got: Counter = Counter()
    carried_by: dict[tuple[str, str], list[tuple[int, int, Any]]] = {}
    for _, p, offset, _, value in outcomes:
        batch = decode_outcomes(value)
        for o in batch.outcomes:
            if o.times:  # (not the join's notices of predicted instances)
                got[o.model_id, o.instance_id] += 1
                carried_by.setdefault((o.model_id, o.instance_id), []).append((p, offset, batch))
    missing = sorted(expected - got)
    extra = sorted(k for k, n in got.items() if n > expected.get(k, 0))
    lost = sorted({i for _, i in missing})[:most]
    where: dict[str, list[str]] = {i: [] for i in lost}
    if lost:
        kinds = {INSTANCE: "instance", PREDICTION: "prediction", LABEL: "label"}
        keys = {STATE + kind + i.encode(): i for i in lost for kind in (RECORD, MEMORY)}
        for topic, q, offset, key, value in read_the_rest():
            if topic == topics.events:
                batch = decode_events(value)
                for row in batch.events:
                    if row[1] in where:
                        source = batch.sources[row[5]]
                        where[row[1]].append(
                            f"{kinds.get(row[0], row[0])} {row[2]} from {source.topic}"
                            f"[{source.partition}]@{row[6]} -> events[{q}]@{offset}"
                        )
            elif topic == topics.dead_letters:
                for i in lost:
                    if i.encode() in value:
                        where[i].append(f"dead-letters[{q}]@{offset}: {value[:300]!r}")
            elif topic == topics.join_changelog and key in keys:
                state = "deleted" if value is None else f"{len(value)} bytes"
                where[keys[key]].append(
                    f"join changelog[{q}]@{offset} {key[1:2].decode()}: {state}"
                )
    return {
        "outcomes_missing": len(missing),
        "outcomes_extra": len(extra),
        "missing": [
            f"{i} ({', '.join(m for m, j in missing if j == i)}): "
            + ("; ".join(where[i]) or "not on the events topic")
            for i in lost
        ],
        "extra": [
            f"{model} {instance}: "
            + "; ".join(
                f"outcomes[{p}]@{offset} (join {b.partition} batch {b.offset}.{b.part})"
                for p, offset, b in carried_by[model, instance]
            )
            for model, instance in extra[:most]
        ],
    }


def _mismatch(got: dict, expected: dict) -> list[str]:
    out = []
    for part in ("metrics", "comparisons", "slices"):
        for key in sorted(set(got[part]) | set(expected[part]), key=str):
            if got[part].get(key) != expected[part].get(key):
                out.append(f"{part} {key}")
    for part in ("alarms", "maturity"):
        if got[part] != expected[part]:
            out.append(f"{part}: {len(got[part])} published, {len(expected[part])} replayed")
    return out


def clean(state: str, code: int | None, refused: bool) -> bool:
    """Whether a SIGTERMed worker ended as it must: status 0; or 1 when Kafka had refused one
    of its records (its output topic deleted), which it said, stopping without a checkpoint."""
    return code == 0 or (state == "output topic deleted" and code == 1 and refused)


def table(report: dict, faults: list[Fault]) -> str:
    """The soak's summary: faults injected and numbers compared."""
    lines = ["fault                          count", "-" * 36]
    for kind, n in sorted(report["faults"].items()):
        lines.append(f"{kind:<30} {n:>5}")
    lines += [
        "",
        f"worker SIGKILLs                {report['kills']:>5}",
        "SIGTERMs (state: seconds to exit, status)",
        *(f"  {s}: {t:.1f} s, {c}" for s, t, c, _ in report["terms"]),
        f"workers that lost their partitions {report['lost']:>5}",
        f"commits the workers saw fail       {report['aborted']:>5}",
        f"send_offsets_to_transaction hung {report['hung']:>7}",
        f"waits for open transactions at assignment: {len(report['waits'])}"
        + (f", longest {max(report['waits']):.1f} s" if report["waits"] else ""),
        f"transactions the broker rolled back on timeout: {len(report['timed_out'])}"
        + (f" ({', '.join(report['timed_out'])})" if report["timed_out"] else ""),
        "",
        f"outcomes evaluated (replay)    {report['outcomes']:>8}",
        f"final records compared         {report['compared']:>8}",
        f"equal to replay                {report['equal']!s:>8}",
        f"records published              {report['records']:>8}",
        f"copies seen by read_committed  {report['copies']:>8}",
        f"unexpected worker exits        {len(report['unexpected_exits']):>8}",
        f"outcomes missing (internal)    {report['outcomes_missing']:>8}",
        f"outcomes more often than replay {report['outcomes_extra']:>7}",
    ]
    if report["missing"]:
        lines += ["instances whose outcomes are missing:", *report["missing"]]
    if report["extra"]:
        lines += ["outcomes more often than in replay:", *report["extra"]]
    if report["mismatch"]:
        lines += ["differences:", *report["mismatch"][:20]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=60_000)
    parser.add_argument("--seconds", type=float, default=420.0)
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--outage", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--blips", type=int, default=6, help="then a run of that many "
                        "broker restarts within the session timeout (0: none)")  # fmt: skip
    args = parser.parse_args(argv)
    plans = [Plan(args.instances, args.seconds, args.kills, args.outage, args.seed)]
    if args.blips:
        plans.append(Plan(args.instances // 2, args.seconds / 2, seed=args.seed, blips=args.blips))
    plans.append(
        Plan(args.instances, args.seconds, args.kills, args.outage, args.seed,
             guarantee="exactly_once")
    )  # fmt: skip
    ok = True
    for plan in plans:
        with tempfile.TemporaryDirectory(prefix="campaign-") as root:
            campaign, report = conduct(Path(root), plan)
        print(table(report, campaign.faults), flush=True)
        for exit_ in report["unexpected_exits"]:
            print(exit_, file=sys.stderr)
        limit = SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S
        ok = ok and report["equal"] and not report["unexpected_exits"]
        ok = ok and all(t <= limit and clean(s, c, r) for s, t, c, r in report["terms"])
        ok = ok and (plan.guarantee != "exactly_once" or report["copies"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
