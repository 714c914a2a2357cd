"""The reduced fault campaign of tests/reliability/campaign.py, in every `make test`: 20 000
instances (about 158 000 records), 20 worker SIGKILLs at random moments among graceful and
ungraceful rebalances, the broker SIGKILLed and restarted in place three times (once before
any worker starts, once for 30 s mid-run), an output topic deleted under running workers, and
SIGTERM in each of those states — then every final number compared with replay; under
at-least-once, and under exactly-once (the default), where no record may be read twice.
``make soak`` runs the same plans three times as large."""

from __future__ import annotations

import pytest

from tests.reliability.campaign import (
    EXIT_MARGIN_S,
    SHUTDOWN_TIMEOUT_S,
    Plan,
    clean,
    conduct,
    table,
)

pytestmark = [pytest.mark.launcher, pytest.mark.reliability]


def test_a_campaign_of_faults_ends_with_replays_numbers(tmp_path):
    plan = Plan(instances=20_000, seconds=100, kills=20, outage_s=30)
    campaign, report = conduct(tmp_path, plan)
    print(table(report, campaign.faults))
    assert report["kills"] >= 20
    assert report["faults"]["broker SIGKILL"] == 3 and report["faults"]["output topic deleted"]
    assert report["equal"], (report["counts"], report["mismatch"])  # n per model too
    assert not report["unexpected_exits"], report["unexpected_exits"]  # no crash loop
    assert report["lost"] >= 1  # the 30 s outage put the workers out of their group
    for state, took, code, refused in report["terms"]:
        assert took <= SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S, (state, took)
        assert clean(state, code, refused), (state, code)


def test_under_exactly_once_no_record_is_read_twice(tmp_path):
    """The same faults with the workers committing their outputs in Kafka transactions:
    replay's numbers, no unexpected exit, every SIGTERM clean, and no record a
    read_committed reader sees twice, published or internal."""
    plan = Plan(instances=12_000, seconds=80, kills=20, outage_s=30, guarantee="exactly_once")
    campaign, report = conduct(tmp_path, plan)
    print(table(report, campaign.faults))
    assert report["kills"] >= 20 and report["faults"]["broker SIGKILL"] == 3
    assert report["faults"]["output topic deleted"]
    assert report["equal"], (report["counts"], report["mismatch"], report["missing"])
    assert report["copies"] == 0, report["copies"]
    # nor an outcome on the internal outcomes topic more often than replay made it
    assert report["outcomes_extra"] == 0, report["extra"]
    assert not report["unexpected_exits"], report["unexpected_exits"]
    for state, took, code, refused in report["terms"]:
        assert took <= SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S, (state, took)
        assert clean(state, code, refused), (state, code)
