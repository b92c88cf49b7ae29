"""chDB's Native blocks (revision 0) rewritten for a client's protocol
revision: BlockInfo first, the custom-serialization flag from 54454."""

from __future__ import annotations

import struct

import pytest

from phasemeter.store.native_revision import BLOCK_INFO, Unsupported, with_revision


def s(text: str) -> bytes:
    return bytes([len(text)]) + text.encode()


def column(name: str, typ: str, data: bytes) -> tuple[bytes, bytes]:
    return s(name) + s(typ), data


COLUMNS = [
    column("a", "UInt8", b"\x01\x02"),
    column("s", "String", s("x") + s("yz")),
    column("n", "Nullable(UInt32)", b"\x00\x01" + struct.pack("<II", 7, 0)),
    column("arr", "Array(UInt8)", struct.pack("<QQ", 1, 3) + b"\x05\x06\x07"),
    column("m", "Map(String, UInt16)", struct.pack("<QQ", 1, 1) + s("k") + struct.pack("<H", 9)),
    column("t", "Tuple(x UInt8, y String)", b"\x01\x02" + s("p") + s("q")),
    column("lc", "LowCardinality(String)", struct.pack("<QQQ", 1, 1 << 9, 2) + s("a") + s("b")
           + struct.pack("<Q", 2) + b"\x00\x01"),
    column("lcn", "LowCardinality(Nullable(String))", struct.pack("<QQQ", 1, 1 << 9, 2) + s("") + s("v")
           + struct.pack("<Q", 2) + b"\x00\x01"),
    column("d", "Decimal(18, 3)", struct.pack("<qq", 1, 2)),
    column("dt", "DateTime64(3, 'UTC')", struct.pack("<qq", 1, 2)),
    column("f", "FixedString(3)", b"abcdef"),
    column("sa", "SimpleAggregateFunction(sum, UInt64)", struct.pack("<QQ", 1, 2)),
]


def block(columns) -> bytes:
    return bytes([len(columns), 2]) + b"".join(head + data for head, data in columns)


def test_revision_zero_is_unchanged():
    body = block(COLUMNS)
    assert with_revision(body, 0) == body


@pytest.mark.parametrize("revision,flag", [(54405, b""), (54460, b"\x00")])
def test_each_block_gets_its_info_and_each_column_its_flag(revision, flag):
    assert len(COLUMNS) == 12
    body = block(COLUMNS) * 2
    want = (BLOCK_INFO + bytes([len(COLUMNS), 2]) + b"".join(head + flag + data for head, data in COLUMNS)) * 2
    assert with_revision(body, revision) == want


def test_aggregate_states_are_refused_by_name():
    with pytest.raises(Unsupported, match="AggregateFunction"):
        with_revision(block([column("q", "AggregateFunction(sum, UInt64)", b"")]), 54460)
