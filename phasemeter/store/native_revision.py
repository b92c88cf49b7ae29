"""Native blocks for a client that names its protocol revision. Pure.

A ClickHouse server answers `default_format=Native&client_protocol_version=N`
(what clickhouse-go sends over HTTP, Grafana's driver) with blocks laid out
for revision N: each block starts with its BlockInfo, and from revision
54454 each column's type is followed by a "custom serialization" flag.
chDB writes revision 0 (no BlockInfo, no flag), so this rewrites its blocks,
walking the column data to find where each column ends (LowCardinality
included, in its own layout as from revision 54405). Aggregate-function
states and the dynamic types are refused (a client reads them finalized).
"""

from __future__ import annotations

import re
import struct

CUSTOM_SERIALIZATION = 54454  # DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION
BLOCK_INFO = b"\x01\x00\x02\xff\xff\xff\xff\x00"  # is_overflows=0, bucket_num=-1, end
_FIXED = {"UInt8": 1, "Int8": 1, "Bool": 1, "Enum8": 1, "UInt16": 2, "Int16": 2, "Date": 2, "Enum16": 2,
          "BFloat16": 2, "UInt32": 4, "Int32": 4, "Float32": 4, "Date32": 4, "DateTime": 4, "IPv4": 4,
          "Decimal32": 4, "UInt64": 8, "Int64": 8, "Float64": 8, "DateTime64": 8, "Decimal64": 8,
          "UInt128": 16, "Int128": 16, "UUID": 16, "IPv6": 16, "Decimal128": 16, "UInt256": 32, "Int256": 32,
          "Decimal256": 32, "Nothing": 1}


class Unsupported(ValueError):
    pass


def _varuint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _args(inner: str) -> list[str]:
    """Top-level comma-separated arguments of a type."""
    out, depth, start, quoted = [], 0, 0, False
    for i, ch in enumerate(inner):
        if ch == "'" and (i == 0 or inner[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        elif not quoted and ch == "," and depth == 0:
            out.append(inner[start:i].strip())
            start = i + 1
    return out + [inner[start:].strip()]


_ELEMENT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\s+(?=[A-Z])")


def _skip(buf: bytes, pos: int, typ: str, rows: int) -> int:
    """The position after `rows` values of `typ` starting at `pos`."""
    name, _, rest = typ.partition("(")
    inner = rest[:-1] if rest else ""
    if name in _FIXED:
        return pos + _FIXED[name] * rows
    if name == "Decimal":
        precision = int(_args(inner)[0])
        return pos + rows * (4 if precision <= 9 else 8 if precision <= 18 else 16 if precision <= 38 else 32)
    if name == "FixedString":
        return pos + int(inner) * rows
    if name == "String":
        for _ in range(rows):
            length, pos = _varuint(buf, pos)
            pos += length
        return pos
    if name == "Nullable":
        return _skip(buf, pos + rows, inner, rows)
    if name == "SimpleAggregateFunction":
        return _skip(buf, pos, _args(inner)[1], rows)
    if name in ("Array", "Map"):
        total = struct.unpack_from("<Q", buf, pos + 8 * (rows - 1))[0] if rows else 0
        element = inner if name == "Array" else f"Tuple({inner})"
        return _skip(buf, pos + 8 * rows, element, total)
    if name == "LowCardinality":
        return _skip_low_cardinality(buf, pos, inner, rows)
    if name == "Tuple":
        for element in _args(inner):
            pos = _skip(buf, pos, _ELEMENT_NAME.sub("", element), rows)
        return pos
    raise Unsupported(f"a {typ} column cannot be sent to a client of protocol revision > 0 "
                      "(read it as a finished value, e.g. with finalizeAggregation or toString)")


_HAS_ADDITIONAL_KEYS = 1 << 9


def _skip_low_cardinality(buf: bytes, pos: int, inner: str, rows: int) -> int:
    """A LowCardinality column: its key version, then granules of (index
    type, own keys, row count, indexes) until every row is read. The keys of
    LowCardinality(Nullable(T)) are written as T."""
    keys = inner[len("Nullable("):-1] if inner.startswith("Nullable(") else inner
    pos += 8  # key serialization version
    while rows > 0:
        flags = struct.unpack_from("<Q", buf, pos)[0]
        pos += 8
        if flags & _HAS_ADDITIONAL_KEYS:
            count = struct.unpack_from("<Q", buf, pos)[0]
            pos = _skip(buf, pos + 8, keys, count)
        granule = struct.unpack_from("<Q", buf, pos)[0]
        pos += 8 + granule * (1 << (flags & 0xFF))
        rows -= granule
    return pos


def with_revision(body: bytes, revision: int) -> bytes:
    """chDB's Native blocks (revision 0) as a server writes them for `revision`."""
    if revision <= 0:
        return body
    out, pos = bytearray(), 0
    while pos < len(body):
        out += BLOCK_INFO
        start = pos
        columns, pos = _varuint(body, pos)
        rows, pos = _varuint(body, pos)
        out += body[start:pos]
        for _ in range(columns):
            start = pos
            for _field in range(2):  # name, type
                length, pos = _varuint(body, pos)
                pos += length
            typ = bytes(body[pos - length:pos]).decode()
            out += body[start:pos]
            if revision >= CUSTOM_SERIALIZATION:
                out += b"\x00"
            start, pos = pos, _skip(body, pos, typ, rows)
            out += body[start:pos]
    return bytes(out)
