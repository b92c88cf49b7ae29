"""One typed settings object, read from the environment (and CLI flags).

Every field documents itself through ``metadata["doc"]``; ``phasemeter config``
and the README table are generated from the same place, so the docs cannot
drift from the code.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path


def _f(default, env: str, doc: str, secret: bool = False):
    return field(default=default, metadata={"env": env, "doc": doc, "secret": secret})


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap_servers: str = _f(
        "", "KAFKA_BOOTSTRAP_SERVERS",
        "Kafka bootstrap servers (host:port,...). Empty: the local KRaft broker started by phasemeter.")
    kafka_security_protocol: str = _f(
        "PLAINTEXT", "KAFKA_SECURITY_PROTOCOL", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.")
    kafka_sasl_mechanism: str = _f("", "KAFKA_SASL_MECHANISM", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.")
    kafka_sasl_username: str = _f("", "KAFKA_SASL_USERNAME", "SASL user name.")
    kafka_sasl_password: str = _f("", "KAFKA_SASL_PASSWORD", "SASL password (never logged).", secret=True)
    kafka_ssl_cafile: str = _f("", "KAFKA_SSL_CAFILE", "CA bundle for SSL/SASL_SSL.")
    topic: str = _f("phasemeter.generations", "PHASEMETER_TOPIC", "Raw event topic the gateways write to.")
    dlq_topic: str = _f("phasemeter.generations.dlq", "PHASEMETER_DLQ_TOPIC",
                        "Dead-letter topic: rejected events with a reason code.")
    phase_topic: str = _f("", "PHASEMETER_PHASE_TOPIC",
                          "Internal topic of valid phase events, keyed by request_id. Empty: <topic>.phases.")
    otlp_topic: str = _f("", "PHASEMETER_OTLP_TOPIC",
                         "Topic of OTLP trace exports the worker also reads (an OpenTelemetry Collector's kafka "
                         "exporter, otlp_proto or otlp_json; docs/ingest/otlp.md). Empty: none.")
    otlp_model: str = _f("", "PHASEMETER_OTLP_MODEL",
                         "Model for OTLP spans that name none (vLLM's V1 engine sets no gen_ai.response.model). "
                         "Empty: such spans are dead-lettered missing_field.")
    label_top_k: int = _f(100, "PHASEMETER_LABEL_TOP_K",
                          "Distinct values kept per model of each label from outside (replica, gateway); later "
                          "ones are stored as `other` and counted in /health (docs/labels.md). 0: unbounded.")
    slos: str = _f("", "PHASEMETER_SLOS",
                   "SLO file (docs/slo.md) the worker counts per minute from its start, and `phasemeter slo` / "
                   "`alerts` read by default. Empty: no SLO (none is declared by default).")
    joined_topic: str = _f("", "PHASEMETER_JOINED_TOPIC",
                           "Internal topic of joined/abandoned generations from phase events. Empty: <topic>.joined.")
    abandon_after_s: float = _f(
        600.0, "PHASEMETER_ABANDON_AFTER_S",
        "A generation with a start but no end this long after t0 is recorded as status=abandoned. "
        "Set it above your longest legitimate generation.")
    orphan_grace_s: float = _f(
        60.0, "PHASEMETER_ORPHAN_GRACE_S",
        "How long a first_token/end waits for its start before it is dead-lettered (orphan_phase); "
        "also how long a joined request_id is remembered to recognise duplicated phases.")
    expiry_tick_s: float = _f(5.0, "PHASEMETER_EXPIRY_TICK_S",
                              "How often the worker looks for abandoned generations and orphan phases.")
    recovery_stall_s: float = _f(
        120.0, "PHASEMETER_RECOVERY_STALL_S",
        "If the join table's recovery after a rebalance reads no changelog record for this long while it "
        "still expects some (after seeking the stuck partitions back once, at a third of it, at most 10 s), "
        "the worker exits with code 75 so its supervisor restarts it.")
    topic_partitions: int = _f(4, "PHASEMETER_TOPIC_PARTITIONS",
                               "Partitions when phasemeter creates the topics (key = request_id).")
    group_id: str = _f("phasemeter-worker", "PHASEMETER_GROUP_ID", "Kafka consumer group of the workers.")
    kafka_session_timeout_s: float = _f(
        30.0, "PHASEMETER_SESSION_TIMEOUT_S",
        "Consumer session timeout: how long a dead worker keeps its partitions before a rebalance.")
    stop_grace_s: float = _f(
        20.0, "PHASEMETER_STOP_GRACE_S",
        "On SIGTERM, how long the worker lets the batch in hand finish before it stops "
        "(a batch cut short is re-read, never lost).")
    clickhouse_url: str = _f(
        "", "CLICKHOUSE_URL",
        "Store DSN: chdb:///abs/path (embedded) or http(s)://user:pass@host:8123/db. Empty: chdb under the data dir.",
        secret=True)
    database: str = _f("phasemeter", "PHASEMETER_DATABASE", "ClickHouse database holding the tables.")
    data_dir: str = _f(".phasemeter", "PHASEMETER_DATA_DIR",
                       "Where the embedded store, the broker data and the worker's pid file live.")
    kafka_cache: str = _f("", "PHASEMETER_KAFKA_CACHE",
                          "Where the local broker's jars are cached. Empty: ~/.cache/phasemeter.")
    bucket_edges: str = _f("0,512,2048,8192,32768", "PHASEMETER_BUCKET_EDGES",
                           "Input-token bucket lower edges, comma separated, or a preset name: default, litellm.")
    batch_rows: int = _f(20_000, "PHASEMETER_BATCH_ROWS",
                         "A batch is written when it holds this many Kafka messages...")
    # 32 MB: an insert of ~90,000 rows drains a backlog of envelopes
    # 1.04-1.45x faster than 8 MB did. It also bounds the re-read window after
    # a resume (pipeline.py), which ends at the log's end offset seen then,
    # so a start on a live topic checks no more than before (docs/performance/worker.md).
    batch_bytes: int = _f(32_000_000, "PHASEMETER_BATCH_BYTES",
                          "...or this many bytes of messages (an envelope carries many generations)...")
    batch_seconds: float = _f(0.5, "PHASEMETER_BATCH_SECONDS",
                              "...or when its oldest message arrived this many seconds ago.")
    web_host: str = _f("127.0.0.1", "PHASEMETER_WEB_HOST",
                       "Worker web port bind address (read-only query API). Loopback by default.")
    web_port: int = _f(6066, "PHASEMETER_WEB_PORT", "Worker web port.")
    allowed_hosts: str = _f("", "PHASEMETER_ALLOWED_HOSTS",
                            "Extra Host names (comma separated) the worker's ports and the OTLP receiver answer, "
                            "beside loopback's; '*' answers any (behind a proxy that checks names). Guards against "
                            "DNS rebinding.")
    sql_port: int = _f(6067, "PHASEMETER_SQL_PORT",
                       "Port of the worker's read-only ClickHouse HTTP interface over its embedded store, bound to "
                       "PHASEMETER_WEB_HOST (docs/sql.md). Beside the web port, not ClickHouse's 8123, which a "
                       "ClickHouse server on the same machine may hold.")
    sql_user: str = _f("default", "PHASEMETER_SQL_USER",
                       "User name the SQL interface asks for when it is bound beyond loopback.")
    sql_password: str = _f("", "PHASEMETER_SQL_PASSWORD",
                           "Password the SQL interface asks for when bound beyond loopback (required there: the "
                           "worker refuses to start without it). On loopback no credentials are asked.", secret=True)
    sql_max_execution_s: float = _f(120.0, "PHASEMETER_SQL_MAX_EXECUTION_S",
                                    "Longest a query through the SQL interface runs (max_execution_time).")
    sql_max_memory_bytes: int = _f(2_000_000_000, "PHASEMETER_SQL_MAX_MEMORY_BYTES",
                                   "Memory one query through the SQL interface may use (max_memory_usage).")
    sql_max_result_rows: int = _f(100_000_000, "PHASEMETER_SQL_MAX_RESULT_ROWS",
                                  "Most rows one answer of the SQL interface holds (max_result_rows).")
    sql_max_result_bytes: int = _f(2_000_000_000, "PHASEMETER_SQL_MAX_RESULT_BYTES",
                                   "Most bytes one answer of the SQL interface holds (max_result_bytes).")
    sql_max_threads: int = _f(2, "PHASEMETER_SQL_MAX_THREADS",
                              "Threads one query through the SQL interface may use (max_threads): keep it, times "
                              "PHASEMETER_SQL_CONCURRENCY, below the machine's cores so a dashboard's scans leave "
                              "the worker some.")
    sql_concurrency: int = _f(2, "PHASEMETER_SQL_CONCURRENCY",
                              "Queries the SQL interface runs at once; more wait their turn (up to the execution "
                              "limit), so dashboards cannot starve ingest of the machine's cores.")
    max_message_bytes: int = _f(1_000_000, "PHASEMETER_MAX_MESSAGE_BYTES",
                                "Larger raw events are dead-lettered as 'oversize'.")
    dlq_payload_bytes: int = _f(4096, "PHASEMETER_DLQ_PAYLOAD_BYTES",
                                "How many bytes of a rejected event's redacted JSON the dead-letter record keeps.")
    raw_ttl_days: int = _f(90, "PHASEMETER_RAW_TTL_DAYS", "Days raw generation rows are kept (set by `phasemeter migrate`).")
    rollup_ttl_days: int = _f(400, "PHASEMETER_ROLLUP_TTL_DAYS",
                              "Days the per-minute rollup is kept (set by `phasemeter migrate`).")

    # -- construction -----------------------------------------------------
    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides) -> "Settings":
        env = os.environ if environ is None else environ
        values = {}
        for f in dataclasses.fields(cls):
            raw = env.get(f.metadata["env"])
            if raw is not None and raw != "":
                values[f.name] = _coerce(f, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    # -- derived values ---------------------------------------------------
    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    @property
    def phase_topic_name(self) -> str:
        return self.phase_topic or f"{self.topic}.phases"

    @property
    def joined_topic_name(self) -> str:
        return self.joined_topic or f"{self.topic}.joined"

    @property
    def ingest_topics(self) -> list[str]:
        """The topics the ingest agent reads: gateways' events, the join's
        output and, when set, OTLP trace exports."""
        return [self.topic, self.joined_topic_name] + ([self.otlp_topic] if self.otlp_topic else [])

    @property
    def topics(self) -> list[str]:
        """Every topic the worker reads or writes (created when missing)."""
        return [self.topic, self.dlq_topic, self.phase_topic_name, self.joined_topic_name] + (
            [self.otlp_topic] if self.otlp_topic else [])

    @property
    def store_dsn(self) -> str:
        return self.clickhouse_url or f"chdb://{self.data_path / 'store'}"

    @property
    def sql_url(self) -> str:
        """The worker's read-only ClickHouse HTTP interface (served over an embedded store)."""
        return f"http://{self.web_host}:{self.sql_port}"

    @property
    def is_embedded(self) -> bool:
        return self.store_dsn.startswith("chdb://")

    def kafka_client_config(self) -> dict:
        """kafka-python style security kwargs (empty for PLAINTEXT)."""
        cfg: dict = {}
        if self.kafka_security_protocol != "PLAINTEXT":
            cfg["security_protocol"] = self.kafka_security_protocol
        if self.kafka_sasl_mechanism:
            cfg.update(sasl_mechanism=self.kafka_sasl_mechanism,
                       sasl_plain_username=self.kafka_sasl_username,
                       sasl_plain_password=self.kafka_sasl_password)
        if self.kafka_ssl_cafile:
            cfg["ssl_cafile"] = self.kafka_ssl_cafile
        return cfg

    def describe(self) -> list[tuple[str, str, str]]:
        """(env var, value with secrets masked, doc) for display."""
        rows = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            shown = mask_secret(str(value)) if f.metadata["secret"] else str(value)
            rows.append((f.metadata["env"], shown, f.metadata["doc"]))
        return rows


def _coerce(f: dataclasses.Field, raw: str):
    kind = f.type if isinstance(f.type, type) else {"int": int, "float": float, "str": str}[f.type]
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{f.metadata['env']}={raw!r} is not a valid {kind.__name__}") from None


_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s]*@")


def redact(text: str) -> str:
    """Mask URL passwords anywhere in a text (error messages embed DSNs)."""
    return _URL_PASSWORD.sub(r"\1***@", text)


def mask_secret(value: str) -> str:
    """A secret setting for display: URLs keep their shape, bare secrets vanish."""
    if not value:
        return ""
    return redact(value) if "://" in value else "***"
