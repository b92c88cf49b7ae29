"""OTLP requests and answers as bytes, below any parser. Pure.

  * the number of spans of a protobuf ExportTraceServiceRequest, by a scan of
    the wire format that stops at a limit, so a body of millions of spans is
    refused before a parser builds an object for each;
  * gzip and deflate inflation, every gzip member, bounded in total;
  * google.rpc.Status (with a detail) for refusals, written by hand: the OTLP
    package does not ship it, and it is three fields.
"""

from __future__ import annotations

import zlib


class BadRequest(ValueError):
    """The body is not an OTLP ExportTraceServiceRequest (HTTP 400)."""


class TooLarge(Exception):
    """The body inflates past the limit (HTTP 413)."""


def count_proto_spans(body: bytes, stop_after: int) -> int:
    """Spans of a serialized ExportTraceServiceRequest (resource_spans = 1,
    ResourceSpans.scope_spans = 2, ScopeSpans.spans = 2), counted on the wire
    up to stop_after + 1. BadRequest for what is no protobuf: a truncated
    field, or a group (which no OTLP message has)."""
    n = 0
    for rs_start, rs_end in _len_fields(body, 0, len(body), 1):
        for ss_start, ss_end in _len_fields(body, rs_start, rs_end, 2):
            for _ in _len_fields(body, ss_start, ss_end, 2):
                n += 1
                if n > stop_after:
                    return n
    return n


def _len_fields(buf: bytes, pos: int, end: int, wanted: int):
    """(start, end) of each length-delimited field numbered `wanted` in buf[pos:end]."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(buf, pos, end)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos, end)
            if pos + size > end:
                raise BadRequest("body is not a protobuf ExportTraceServiceRequest: a field runs past its end")
            if key >> 3 == wanted:
                yield pos, pos + size
            pos += size
        else:
            raise BadRequest(f"body is not a protobuf ExportTraceServiceRequest: wire type {wire}")
    if pos > end:
        raise BadRequest("body is not a protobuf ExportTraceServiceRequest: a field runs past its end")


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 70:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise BadRequest("body is not a protobuf ExportTraceServiceRequest: a truncated varint")


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """gzip or deflate (zlib-wrapped or raw) body, never more than `limit`
    bytes out. Every member of a multi-member gzip body is read (RFC 1952
    2.2: a file is a series of members), as `gzip -d` does; their total is
    what the limit bounds. TooLarge past the limit."""
    out, rest = bytearray(), body
    while True:
        wbits = 31 if encoding == "gzip" else (15 if rest[:1] == b"\x78" else -15)
        d = zlib.decompressobj(wbits=wbits)
        try:
            out += d.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise BadRequest(f"body is not valid {encoding}: {exc}") from None
        if len(out) > limit:
            raise TooLarge
        if not d.eof:
            if d.unconsumed_tail:  # stopped by the limit with input left: over it
                raise TooLarge
            raise BadRequest(f"{encoding} body is truncated")
        rest = d.unused_data
        if encoding != "gzip" or not rest:
            break
    if rest:
        raise BadRequest(f"{len(rest)} bytes after the end of the {encoding} stream")
    return bytes(out)



def status_protobuf(code: int, message: str, details: bytes = b"") -> bytes:
    """google.rpc.Status{code=1, message=2, details=3 (an encoded Any)}, by
    hand: the OTLP package does not ship it, and it is three fields."""
    text = message.encode("utf-8")
    out = b"\x08" + varint(code) + b"\x12" + varint(len(text)) + text
    return out + (b"\x1a" + varint(len(details)) + details if details else b"")


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
