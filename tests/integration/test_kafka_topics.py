"""The worker's topics on the real broker: `ensure_topics` creates what is
missing, the table changelogs compacted, and returns only once the broker's
metadata has each one with a leader for every partition, because a consumer
group formed before then assigns none of a missing topic's partitions."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from phasemeter.kafka_local import ensure_topics

pytestmark = pytest.mark.integration


def _policies(admin, names):
    found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names],
                                   config_filter="all")
    by_name = next(iter(found.values()))
    return {n: by_name[n]["cleanup.policy"]["value"] for n in names}


def test_topics_are_created_compacted_where_asked_and_visible_with_leaders_on_return(kafka_bootstrap):
    tag = uuid.uuid4().hex[:8]
    plain, changelog = [f"t-{tag}", f"t-{tag}.phases"], f"g-{tag}-phasemeter-join-changelog"
    ensure_topics(kafka_bootstrap, plain, 3, compacted=[changelog])
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        # No wait here: the return itself is the promise.
        described = {t["name"]: t for t in admin.describe_topics(plain + [changelog])}
        assert sorted(described) == sorted(plain + [changelog])
        for name, topic in described.items():
            assert topic["error_code"] == 0, (name, topic)
            leaders = sorted((p["partition_index"], p["leader_id"]) for p in topic["partitions"])
            assert [i for i, _ in leaders] == [0, 1, 2], (name, leaders)
            assert all(leader >= 0 for _, leader in leaders), (name, leaders)
        assert _policies(admin, plain + [changelog]) == {plain[0]: "delete", plain[1]: "delete",
                                                          changelog: "compact"}
        # Again, with every topic there (a second worker of the group): a no-op.
        ensure_topics(kafka_bootstrap, plain, 3, compacted=[changelog])
        assert len(admin.describe_topics([changelog])[0]["partitions"]) == 3
    finally:
        admin.close()
