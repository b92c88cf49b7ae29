"""Answers compressed as clients ask: ClickHouse's checksummed LZ4 blocks and
the HTTP encodings."""

from __future__ import annotations

import gzip
import struct

import lz4.block
from clickhouse_cityhash.cityhash import CityHash128

from phasemeter.store.sql_compress import BLOCK, encode, http_encoding, native_blocks


def blocks(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        low, high = struct.unpack_from("<QQ", data, pos)
        method, size, raw = struct.unpack_from("<BII", data, pos + 16)
        block = data[pos + 16:pos + 16 + size]
        assert method == 0x82 and (low << 64) | high == CityHash128(block)
        out.append(lz4.block.decompress(block[9:], uncompressed_size=raw))
        pos += 16 + size
    return out


def test_native_blocks_hold_at_most_a_mebibyte_each_and_check():
    body = bytes(range(256)) * (BLOCK // 256 * 2 + 5)
    got = blocks(native_blocks(body))
    assert [len(b) for b in got] == [BLOCK, BLOCK, 5 * 256]
    assert b"".join(got) == body
    assert blocks(native_blocks(b"")) == [b""]


def test_the_first_encoding_the_client_names_that_is_written():
    assert http_encoding("br, zstd;q=0.9, gzip") == "zstd"
    assert http_encoding("br") is None
    assert http_encoding("gzip, deflate") == "gzip"


def test_native_blocks_inside_the_http_encoding():
    body, encoding = encode(b"x" * 1000, native=True, accept="gzip")
    assert encoding == "gzip" and blocks(gzip.decompress(body)) == [b"x" * 1000]
    assert encode(b"abc", native=False, accept=None) == (b"abc", None)
