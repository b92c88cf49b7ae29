"""One request to the read-only SQL interface, read from what a ClickHouse
HTTP client sends. Pure: the listener (stream_jobs/sql_http.py) and
`phasemeter sql` hand it the URL parameters, the body and the headers.

ClickHouse's HTTP interface takes the query in `?query=` and/or the POST body
(both: the URL part first), `database`, `default_format`, `param_<name>` for
`{name:Type}` placeholders (bound by the engine, never spliced), settings by
name, and credentials as basic auth, `X-ClickHouse-User`/`X-ClickHouse-Key`
or `user`/`password` (docs/sql.md, "Connecting").
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field

from phasemeter.store.sql_guard import ChError

# Parameters of the protocol itself, not settings: read here or ignored.
TRANSPORT = frozenset({"query", "database", "default_format", "query_id", "session_id", "session_timeout",
                       "session_check", "user", "password", "quota_key", "compress", "decompress",
                       "enable_http_compression", "http_zlib_compression_level", "wait_end_of_query",
                       "buffer_size", "send_progress_in_http_headers", "http_headers_progress_interval_ms",
                       "client_protocol_version", "role", "cancel_http_readonly_queries_on_client_close",
                       "http_response_buffer_size", "add_http_cors_header", "network_compression_method",
                       "network_zstd_compression_level"})
# Limits a request may lower, never raise (the worker's own are the caps).
LIMITS = ("max_execution_time", "max_memory_usage", "max_result_rows", "max_result_bytes", "max_threads")
# Settings that only change how results are written: applied as asked.
OUTPUT_SETTINGS = frozenset({
    "date_time_output_format", "session_timezone", "extremes", "output_format_json_quote_64bit_integers",
    "output_format_json_quote_64bit_floats", "output_format_json_quote_denormals",
    "output_format_json_quote_decimals", "output_format_json_named_tuples_as_objects",
    "output_format_json_array_of_rows", "output_format_write_statistics", "output_format_decimal_trailing_zeros",
    "output_format_csv_crlf_end_of_line", "output_format_tsv_crlf_end_of_line", "format_csv_delimiter",
    "output_format_arrow_string_as_string", "output_format_arrow_low_cardinality_as_dictionary",
    "output_format_parquet_string_as_string", "output_format_parquet_compression_method",
    "output_format_native_encode_types_in_binary_format", "output_format_pretty_color",
    "output_format_pretty_max_rows", "output_format_json_validate_utf8", "max_block_size"})
SETTABLE = OUTPUT_SETTINGS | frozenset(LIMITS)


@dataclass(frozen=True)
class SqlRequest:
    sql: str
    database: str | None = None
    default_format: str = "TabSeparated"
    params: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    query_id: str = ""
    user: str = ""
    password: str = ""
    compression: bool = False  # enable_http_compression=1: Content-Encoding as Accept-Encoding asks
    native_compression: bool = False  # compress=1: ClickHouse's own compressed blocks
    protocol_revision: int = 0  # client_protocol_version: the layout of Native blocks the client reads
    wait_end: bool = False  # wait_end_of_query=1: the whole answer made before it is sent, with its totals


def credentials(params: dict, headers: dict) -> tuple[str, str]:
    """(user, password) from basic auth, the X-ClickHouse-* headers or the URL."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("basic "):
        try:
            user, _, password = base64.b64decode(auth[6:].strip(), validate=True).decode().partition(":")
            return user, password
        except (binascii.Error, UnicodeDecodeError):
            raise ChError("AUTHENTICATION_FAILED", "Malformed basic authorization header") from None
    if "x-clickhouse-user" in headers:
        return headers["x-clickhouse-user"], headers.get("x-clickhouse-key", "")
    return params.get("user", ""), params.get("password", "")


def _limit(name: str, value: str, cap: int | float) -> str:
    try:
        number = float(value)
    except ValueError:
        raise ChError("READONLY", f"Cannot modify '{name}' setting in readonly mode: {value!r} is not a number") from None
    if not 0 < number <= cap:
        raise ChError("READONLY", f"Cannot modify '{name}' setting in readonly mode: "
                                  f"the SQL interface allows at most {cap:g}")
    return value


def parse(params: list[tuple[str, str]], body: str, headers: dict, caps: dict) -> SqlRequest:
    """The request, or the ChError a ClickHouse server would answer. `params`
    are the URL's (repeats: the last wins), `headers` lower-cased names,
    `caps` the worker's limits by setting name."""
    url = dict(params)
    sql = "\n".join(part for part in (url.get("query", ""), body) if part.strip())
    if not sql.strip():
        raise ChError("SYNTAX_ERROR", "Empty query")
    bound, settings = {}, {}
    for name, value in url.items():
        if name.startswith("param_"):
            bound[name[6:]] = value
        elif name in TRANSPORT:
            continue
        elif name == "readonly" and value in ("1", "2"):
            continue  # asking for readonly is asking for what every query already gets
        elif name in LIMITS:
            settings[name] = _limit(name, value, caps[name])
        elif name in OUTPUT_SETTINGS:
            settings[name] = value
        else:
            raise ChError("READONLY", f"Cannot modify '{name}' setting in readonly mode")
    user, password = credentials(url, headers)
    return SqlRequest(sql=sql, database=url.get("database") or headers.get("x-clickhouse-database") or None,
                      default_format=url.get("default_format") or headers.get("x-clickhouse-format")
                      or "TabSeparated",
                      params=bound, settings=settings, query_id=url.get("query_id", ""),
                      user=user, password=password, compression=url.get("enable_http_compression") in ("1", "true"),
                      native_compression=url.get("compress") in ("1", "true"),
                      wait_end=url.get("wait_end_of_query") in ("1", "true"),
                      protocol_revision=int(url.get("client_protocol_version", "0") or 0)
                      if url.get("client_protocol_version", "0").isdigit() else 0)
