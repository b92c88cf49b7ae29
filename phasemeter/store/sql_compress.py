"""The SQL interface's answer, compressed as the client asked. Pure.

Two layers, as in ClickHouse's HTTP handler:

- `compress=1`: ClickHouse's own compressed blocks, which the JDBC driver
  and clickhouse-go's LZ4/ZSTD modes ask for and always decode. Each block
  is a 16-byte CityHash128 (v1.0.2) of what follows, a method byte (0x82
  LZ4), the compressed size with the 9-byte header and the raw size (both
  UInt32 little-endian), then the LZ4 block; at most 1 MiB raw per block
  (ClickHouse's max_compress_block_size).
- `enable_http_compression=1` with `Accept-Encoding`: the first of gzip,
  deflate, lz4 (frame), zstd that the client names, as `Content-Encoding`.
"""

from __future__ import annotations

import struct
import zlib

BLOCK = 1 << 20
LZ4_METHOD = 0x82
HTTP_ENCODINGS = ("gzip", "deflate", "lz4", "zstd")


def native_blocks(body: bytes) -> bytes:
    """`body` as ClickHouse's checksummed LZ4 blocks (`compress=1`)."""
    import lz4.block
    from clickhouse_cityhash.cityhash import CityHash128

    out = bytearray()
    view = memoryview(body)
    for start in range(0, max(len(body), 1), BLOCK):
        raw = view[start:start + BLOCK]
        packed = lz4.block.compress(raw, store_size=False)
        block = struct.pack("<BII", LZ4_METHOD, 9 + len(packed), len(raw)) + packed
        digest = CityHash128(block)
        out += struct.pack("<QQ", digest >> 64, digest & 0xFFFFFFFFFFFFFFFF) + block
    return bytes(out)


def http_encoding(accept: str) -> str | None:
    """The first encoding of an Accept-Encoding header that this listener writes."""
    for name in (part.split(";")[0].strip().lower() for part in accept.split(",")):
        if name in HTTP_ENCODINGS:
            return name
    return None


def _http_compressor(encoding: str):
    """An incremental compressor: .compress(bytes) -> bytes, .flush() -> bytes."""
    if encoding == "gzip":
        return zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 16+15: the gzip container
    if encoding == "deflate":
        return zlib.compressobj(1)
    if encoding == "lz4":
        import lz4.frame

        return _Lz4Frame(lz4.frame.LZ4FrameCompressor())
    try:
        from compression import zstd  # Python 3.14
    except ImportError:
        from backports import zstd
    return zstd.ZstdCompressor()


class _Lz4Frame:
    def __init__(self, compressor):
        self.c, self.started = compressor, False

    def compress(self, data) -> bytes:
        head = b"" if self.started else self.c.begin()
        self.started = True
        return head + self.c.compress(data)

    def flush(self) -> bytes:
        return (b"" if self.started else self.c.begin()) + self.c.flush()


class Encoder:
    """An answer encoded piece by piece as it comes from the engine: native
    blocks per piece, then the HTTP encoding around the whole stream."""

    def __init__(self, native: bool, accept: str | None):
        self.native = native
        self.encoding = http_encoding(accept) if accept else None
        self._http = _http_compressor(self.encoding) if self.encoding else None

    def chunk(self, data) -> bytes | memoryview:
        if self.native:
            data = native_blocks(data)
        return self._http.compress(data) if self._http else data

    def end(self) -> bytes:
        return self._http.flush() if self._http else b""


def encode(body: bytes, native: bool, accept: str | None) -> tuple[bytes, str | None]:
    """(bytes to send, Content-Encoding or None) of a whole answer."""
    encoder = Encoder(native, accept)
    return bytes(encoder.chunk(body)) + encoder.end(), encoder.encoding
