"""topics/topics.toml as the worker and `streameval topics create` read it."""

from streameval.topics import load_topics


def test_changelog_topics_take_their_configs_from_the_settings():
    loaded = load_topics("p-", app_id="fraud", changelog_configs={"retention.bytes": "10"})
    specs = {s.base: s for s in loaded}
    changelog = specs["streameval-join-changelog"]
    assert changelog.name == "p-fraud-join-changelog"
    assert changelog.configs["cleanup.policy"] == "compact"
    assert changelog.configs["retention.bytes"] == "10"
    assert "retention.bytes" not in specs["streameval-events"].configs
    assert specs["streameval-eval-changelog"].configs["retention.bytes"] == "10"
