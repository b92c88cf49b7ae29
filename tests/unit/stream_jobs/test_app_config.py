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
