"""Kafka security settings reach Faust (no broker needed to check the wiring)."""

import faust

from phasemeter.settings import Settings
from phasemeter.stream_jobs.app import _broker_credentials


def test_plaintext_has_no_credentials():
    assert _broker_credentials(Settings()) is None


def test_sasl_ssl_credentials_with_tls_context():
    s = Settings.from_env({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                           "KAFKA_SASL_USERNAME": "pm", "KAFKA_SASL_PASSWORD": "pw"})
    creds = _broker_credentials(s)
    assert isinstance(creds, faust.SASLCredentials)
    assert creds.username == "pm" and creds.password == "pw" and creds.ssl_context is not None
    assert "pw" not in repr(creds)
    assert s.kafka_client_config()["security_protocol"] == "SASL_SSL"


def test_ssl_only():
    creds = _broker_credentials(Settings.from_env({"KAFKA_SECURITY_PROTOCOL": "SSL"}))
    assert isinstance(creds, faust.SSLCredentials)


def test_changelog_topics_names_the_join_tables_compacted_changelog(tmp_path):
    """cmd_worker creates these beside its own topics: Faust's own
    declaration comes only as its consumer starts (docs/phases.md)."""
    from phasemeter.stream_jobs.app import changelog_topics, create_app

    settings = Settings.from_env({"PHASEMETER_DATA_DIR": str(tmp_path), "PHASEMETER_GROUP_ID": "grp-x",
                                  "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"})  # never dialled
    app = create_app(settings)
    assert changelog_topics(app) == ["grp-x-phasemeter-join-changelog"]
    (table,) = app.tables.values()
    assert table.changelog_topic.compacting and table.changelog_topic.partitions == settings.topic_partitions


def test_the_app_keeps_fausts_memory_store_and_web_server(tmp_path):
    """create_app leaves both to Faust's defaults: the join table in memory
    (restored from its changelog) and the web port (live page, /health)."""
    from phasemeter.stream_jobs.app import create_app

    app = create_app(Settings.from_env({"PHASEMETER_DATA_DIR": str(tmp_path),
                                        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}))  # never dialled
    assert str(app.conf.store) == "memory:" and app.conf.web_enabled is True
