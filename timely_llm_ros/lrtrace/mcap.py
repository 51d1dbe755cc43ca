"""A small MCAP writer that keeps the file finished after every flush, and a recovering scanner.

Why not the ``rosbags`` MCAP writer: it keeps up to 1 MiB of messages in memory and writes the
summary, the footer and ``metadata.yaml`` only in ``close()``; a recorder killed with SIGKILL
leaves a file without footer that ``rosbags`` refuses ("File end magic is invalid") and no
``metadata.yaml`` at all. Here every :meth:`McapFile.flush` appends the pending messages as one
chunk and then rewrites the summary section and footer behind it, all in ONE ``write`` call at
the end of the data section: after ``flush`` returns, the file on disk is a complete, indexed MCAP
file, whatever happens to the process next. (A kill can only land between two flushes; what was
written after the last flush is lost, nothing before it.)

For files that were not written this way (another tool, a disk filling up, a copy cut short),
:func:`scan_records` reads the data section record by record and stops at the first damaged one,
so the caller gets every message before the damage plus a description of it.

Format: MCAP v0 as published at mcap.dev/spec (records = opcode u8 + length u64 + content,
little-endian, strings and byte arrays length-prefixed). Layout written here, the one readers such
as ``rosbags`` and ``rosbag2_storage_mcap`` index directly: header, then per flush [new schemas,
new channels, one chunk (uncompressed, or zstd-compressed with ``compression="zstd"``, rosbag2's
``zstd_fast``/``zstd_small`` presets' codec), its message indexes, new metadata records], then
DataEnd, the summary (schemas, channels, chunk indexes, metadata indexes, statistics, summary
offsets), footer, magic.
"""

from __future__ import annotations

import errno
import io
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"\x89MCAP0\r\n"
OP_HEADER, OP_FOOTER, OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
OP_MESSAGE_INDEX, OP_CHUNK_INDEX, OP_STATISTICS, OP_METADATA, OP_METADATA_INDEX = 0x07, 0x08, 0x0B, 0x0C, 0x0D
COMPRESSIONS = ("", "zstd")  # chunk codecs this writer offers
OP_SUMMARY_OFFSET, OP_DATA_END = 0x0E, 0x0F
_KNOWN_OPS = frozenset(range(0x01, 0x10))


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<I", len(b)) + b


def _bytes32(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def _map_ss(d: dict[str, str]) -> bytes:
    body = b"".join(_str(k) + _str(v) for k, v in d.items())
    return struct.pack("<I", len(body)) + body


def _record(op: int, content: bytes) -> bytes:
    return struct.pack("<BQ", op, len(content)) + content


@dataclass
class _Chunk:
    start: int = 2**63 - 1
    end: int = 0
    body: io.BytesIO = field(default_factory=io.BytesIO)
    index: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # channel -> [(t, offset)]
    count: int = 0


class McapFile:
    """Append-only MCAP writer whose file is complete after every :meth:`flush`.

    Schemas and channels are registered with :meth:`add_schema` / :meth:`add_channel` (ids from 1),
    messages with :meth:`add_message` (raw payload bytes). Not thread-safe: the caller locks.
    """

    def __init__(
        self,
        path: Path,
        profile: str = "ros2",
        library: str = "timely_llm_ros",
        compression: str = "",
        level: int = 1,
    ) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"chunk compression must be one of {COMPRESSIONS}, got {compression!r}")
        self.compression = compression
        self._codec = zstd_module() if compression == "zstd" else None  # a missing codec: fail now
        self.level = level
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        head = MAGIC + _record(OP_HEADER, _str(profile) + _str(library))
        self._data_end = len(head)  # where the next data record goes (the summary follows it)
        self._schemas: list[bytes] = []  # encoded schema records, in id order
        self._channels: list[bytes] = []
        self._new_defs: list[bytes] = []  # schema/channel records not yet in the data section
        self._chunk_indexes: list[bytes] = []
        self._new_meta: list[tuple[str, bytes]] = []  # metadata records not yet in the data section
        self._meta_indexes: list[bytes] = []
        self._chunk = _Chunk()
        self._counts: dict[int, int] = {}
        self._seq: dict[int, int] = {}
        self.message_count = 0
        self.start_time = 2**63 - 1
        self.end_time = 0
        self.closed = False
        self.failed = False
        os.pwrite(self._fd, head, 0)
        self._write_tail(b"")
        self._mark_durable()

    # -- registration ---------------------------------------------------------------------------
    def add_schema(self, name: str, encoding: str, data: str) -> int:
        sid = len(self._schemas) + 1
        rec = _record(
            OP_SCHEMA, struct.pack("<H", sid) + _str(name) + _str(encoding) + _bytes32(data.encode("utf-8"))
        )
        self._schemas.append(rec)
        self._new_defs.append(rec)
        return sid

    def add_channel(self, schema_id: int, topic: str, message_encoding: str, metadata: dict[str, str]) -> int:
        cid = len(self._channels) + 1
        rec = _record(
            OP_CHANNEL,
            struct.pack("<HH", cid, schema_id) + _str(topic) + _str(message_encoding) + _map_ss(metadata),
        )
        self._channels.append(rec)
        self._new_defs.append(rec)
        self._counts[cid] = 0
        self._seq[cid] = 0
        return cid

    def add_metadata(self, name: str, metadata: dict[str, str]) -> None:
        """A Metadata record (written and indexed at the next flush), e.g. rosbag2's ``rosbag2``."""
        self._new_meta.append((name, _record(OP_METADATA, _str(name) + _map_ss(metadata))))

    # -- messages -------------------------------------------------------------------------------
    def add_message(
        self, channel_id: int, log_time: int, data: bytes | memoryview, publish_time: int | None = None
    ) -> None:
        if channel_id not in self._counts:
            raise ValueError(f"unknown MCAP channel id {channel_id}")
        if not 0 <= log_time < 2**64:
            raise ValueError(f"log time must be an unsigned 64-bit nanosecond count, got {log_time}")
        ch = self._chunk
        ch.index.setdefault(channel_id, []).append((log_time, ch.body.tell()))
        seq = self._seq[channel_id]
        self._seq[channel_id] = (seq + 1) & 0xFFFFFFFF
        pub = log_time if publish_time is None else publish_time
        ch.body.write(_record(OP_MESSAGE, struct.pack("<HIQQ", channel_id, seq, log_time, pub) + bytes(data)))
        ch.start = min(ch.start, log_time)
        ch.end = max(ch.end, log_time)
        ch.count += 1
        self._counts[channel_id] += 1
        self.message_count += 1
        self.start_time = min(self.start_time, log_time)
        self.end_time = max(self.end_time, log_time)

    @property
    def pending_bytes(self) -> int:
        return self._chunk.body.tell()

    @property
    def channel_counts(self) -> dict[int, int]:
        return dict(self._counts)

    # -- persistence ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Append pending definitions and messages, then rewrite summary + footer (one write)."""
        if self.closed:
            return
        if not self._new_defs and not self._chunk.count and not self._new_meta:
            return
        out = io.BytesIO()
        for rec in self._new_defs:
            out.write(rec)
        self._new_defs = []
        if self._chunk.count:
            self._write_chunk(out)
        for name, rec in self._new_meta:
            offset = self._data_end + out.tell()
            out.write(rec)
            self._meta_indexes.append(
                _record(OP_METADATA_INDEX, struct.pack("<QQ", offset, len(rec)) + _str(name))
            )
        self._new_meta = []
        data = out.getvalue()
        try:
            self._write_tail(data)
        except OSError:
            self._rollback()
            raise
        self._mark_durable()

    def _mark_durable(self) -> None:
        """Remember what the file holds now (the state :meth:`_rollback` returns to)."""
        self._durable = (
            len(self._schemas),
            len(self._channels),
            len(self._chunk_indexes),
            dict(self._counts),
            self.message_count,
            self.start_time,
            self.end_time,
            self._data_end,
        )

    def _rollback(self) -> None:
        """A write failed (a full disk): the file goes back to its last complete state — cut at the
        end of the last written chunk (which frees the space of the failed write) and closed with the
        summary it had — and this writer stops; the pending messages are lost, the written ones stay
        readable."""
        ns, nc, nci, counts, mc, st, et, de = self._durable
        del self._schemas[ns:]
        del self._channels[nc:]
        del self._chunk_indexes[nci:]
        self._counts = counts
        self.message_count, self.start_time, self.end_time = mc, st, et
        self._data_end = de
        self._new_defs = []
        self._chunk = _Chunk()
        try:
            os.ftruncate(self._fd, de)
            self._write_tail(b"")
            os.fsync(self._fd)
        except OSError:  # the disk refuses even that: the file ends at the last chunk (still scannable)
            pass
        os.close(self._fd)
        self.failed = self.closed = True

    def _write_chunk(self, out: io.BytesIO) -> None:
        ch = self._chunk
        raw = ch.body.getvalue()
        stored = self._codec.compress(raw, level=self.level) if self._codec is not None else raw
        chunk_start = self._data_end + out.tell()
        out.write(
            _record(
                OP_CHUNK,
                struct.pack("<QQQI", ch.start, ch.end, len(raw), zlib.crc32(raw))
                + _str(self.compression)
                + struct.pack("<Q", len(stored))
                + stored,
            )
        )
        chunk_len = self._data_end + out.tell() - chunk_start
        offsets = []
        for cid in sorted(ch.index):
            offsets.append((cid, self._data_end + out.tell()))
            entries = b"".join(struct.pack("<QQ", t, off) for t, off in ch.index[cid])
            out.write(_record(OP_MESSAGE_INDEX, struct.pack("<H", cid) + _bytes32(entries)))
        index_len = self._data_end + out.tell() - chunk_start - chunk_len
        offs = b"".join(struct.pack("<HQ", cid, off) for cid, off in offsets)
        self._chunk_indexes.append(
            _record(
                OP_CHUNK_INDEX,
                struct.pack("<QQQQ", ch.start, ch.end, chunk_start, chunk_len)
                + _bytes32(offs)
                + struct.pack("<Q", index_len)
                + _str(self.compression)
                + struct.pack("<QQ", len(stored), len(raw)),
            )
        )
        self._chunk = _Chunk()

    def _write_tail(self, data: bytes) -> None:
        """Write ``data`` at the end of the data section, then DataEnd, summary, footer and magic."""
        data_end = self._data_end + len(data)
        tail = io.BytesIO()
        tail.write(_record(OP_DATA_END, struct.pack("<I", 0)))
        summary_start = data_end + tail.tell()
        groups: list[tuple[int, int, int]] = []

        def group(op: int, records: list[bytes]) -> None:
            if records:
                start = data_end + tail.tell()
                for rec in records:
                    tail.write(rec)
                groups.append((op, start, data_end + tail.tell() - start))

        group(OP_SCHEMA, self._schemas)
        group(OP_CHANNEL, self._channels)
        group(OP_CHUNK_INDEX, self._chunk_indexes)
        group(OP_METADATA_INDEX, self._meta_indexes)
        counts = b"".join(struct.pack("<HQ", cid, n) for cid, n in sorted(self._counts.items()))
        start = self.start_time if self.message_count else 0
        stats = struct.pack(
            "<QHIIIIQQ",
            self.message_count,
            len(self._schemas),
            len(self._channels),
            0,
            len(self._meta_indexes),
            len(self._chunk_indexes),
            start,
            self.end_time,
        ) + _bytes32(counts)
        group(OP_STATISTICS, [_record(OP_STATISTICS, stats)])
        offset_start = data_end + tail.tell()
        for op, gstart, glen in groups:
            tail.write(_record(OP_SUMMARY_OFFSET, struct.pack("<BQQ", op, gstart, glen)))
        tail.write(_record(OP_FOOTER, struct.pack("<QQI", summary_start, offset_start, 0)))
        tail.write(MAGIC)
        blob = data + tail.getvalue()
        view, done = memoryview(blob), 0
        while done < len(blob):  # a short write is retried: a full disk then raises its own ENOSPC
            n = os.pwrite(self._fd, view[done:], self._data_end + done)
            if n <= 0:
                raise OSError(errno.ENOSPC, f"short write to {self.path}: {done} of {len(blob)} bytes")
            done += n
        os.ftruncate(self._fd, self._data_end + len(blob))
        self._data_end = data_end

    def close(self) -> None:
        if self.closed:
            return
        self.flush()
        os.fsync(self._fd)
        os.close(self._fd)
        self.closed = True


# ------------------------------------------------------------------------------------ reading
@dataclass
class ScannedChannel:
    id: int
    topic: str
    schema_name: str
    schema_encoding: str
    schema_data: str
    message_encoding: str
    metadata: dict[str, str]


@dataclass
class ScanResult:
    """What :func:`scan_records` could read, and why it stopped early (``problem``, else '')."""

    channels: dict[int, ScannedChannel] = field(default_factory=dict)
    messages: list[tuple[int, int, bytes]] = field(default_factory=list)  # (channel id, log time, data)
    finished: bool = False  # a footer was found: the writer closed (or flushed) the file
    problem: str = ""


def _read_str(buf: memoryview, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<I", buf, pos)
    end = pos + 4 + n
    if end > len(buf):
        raise ValueError("string runs past its record")
    return bytes(buf[pos + 4 : end]).decode("utf-8"), end


def _read_map(buf: memoryview, pos: int) -> tuple[dict[str, str], int]:
    (n,) = struct.unpack_from("<I", buf, pos)
    end = pos + 4 + n
    out = {}
    p = pos + 4
    while p < end:
        k, p = _read_str(buf, p)
        v, p = _read_str(buf, p)
        out[k] = v
    return out, end


class CodecMissing(ImportError):
    """A chunk compression whose Python module is not installed; the message names the pip package."""


def zstd_module():
    """The zstd codec: the standard library's ``compression.zstd`` (Python >= 3.14), else
    ``backports.zstd`` (the same API; a dependency of ``rosbags``). Imported only when a bag's chunks
    are zstd-compressed, so an uncompressed bag needs neither."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python >= 3.14
    except ImportError:
        try:
            from backports import zstd
        except ImportError:
            raise CodecMissing(
                "zstd-compressed MCAP chunks need the zstd codec: pip install backports.zstd "
                "(it comes with rosbags; built into Python >= 3.14)"
            ) from None
    return zstd


def lz4_frame():
    """The lz4 frame codec (pip ``lz4``, a dependency of ``rosbags``; no rosdep key), imported only
    for a bag written by another tool with lz4 chunks."""
    try:
        import lz4.frame
    except ImportError:
        raise CodecMissing(
            "lz4-compressed MCAP chunks need the lz4 codec: pip install lz4 (it comes with rosbags)"
        ) from None
    return lz4.frame


def _decompress(data: bytes, compression: str, size: int) -> bytes:
    if compression == "":
        return data
    if compression == "zstd":
        return zstd_module().decompress(data)
    if compression == "lz4":
        return lz4_frame().decompress(data)
    raise ValueError(f"unsupported chunk compression {compression!r}")


def scan_records(path: Path) -> ScanResult:
    """Read an MCAP file front to back without its summary; stop at the first damaged record."""
    res = ScanResult()
    raw = Path(path).read_bytes()
    if not raw.startswith(MAGIC):
        res.problem = "not an MCAP file (bad magic)" if raw else "file is empty"
        return res
    schemas: dict[int, tuple[str, str, str]] = {}
    pos = len(MAGIC)
    n = len(raw)
    view = memoryview(raw)

    def walk(buf: memoryview, pos: int, end: int, in_chunk: bool) -> str:
        while pos < end:
            if end - pos < 9:
                return f"file ends inside a record header at byte {pos}"
            op, length = struct.unpack_from("<BQ", buf, pos)
            body_start = pos + 9
            body_end = body_start + length
            if op not in _KNOWN_OPS and op < 0x80:
                return f"unknown record opcode 0x{op:02x} at byte {pos}"
            if body_end > end:
                return f"record 0x{op:02x} at byte {pos} is cut off ({end - body_start} of {length} bytes)"
            body = buf[body_start:body_end]
            try:
                if op == OP_SCHEMA:
                    (sid,) = struct.unpack_from("<H", body, 0)
                    name, p = _read_str(body, 2)
                    enc, p = _read_str(body, p)
                    (dlen,) = struct.unpack_from("<I", body, p)
                    schemas[sid] = (name, enc, bytes(body[p + 4 : p + 4 + dlen]).decode("utf-8"))
                elif op == OP_CHANNEL:
                    cid, sid = struct.unpack_from("<HH", body, 0)
                    topic, p = _read_str(body, 4)
                    menc, p = _read_str(body, p)
                    meta, p = _read_map(body, p)
                    sname, senc, sdata = schemas.get(sid, ("", "", ""))
                    res.channels.setdefault(cid, ScannedChannel(cid, topic, sname, senc, sdata, menc, meta))
                elif op == OP_MESSAGE:
                    cid, _seq, log_time, _pub = struct.unpack_from("<HIQQ", body, 0)
                    res.messages.append((cid, log_time, bytes(body[22:])))
                elif op == OP_CHUNK and not in_chunk:
                    _s, _e, usize, crc = struct.unpack_from("<QQQI", body, 0)
                    comp, p = _read_str(body, 28)
                    (clen,) = struct.unpack_from("<Q", body, p)
                    data = _decompress(bytes(body[p + 8 : p + 8 + clen]), comp, usize)
                    if len(data) != usize or (crc and zlib.crc32(data) != crc):
                        return f"chunk at byte {pos} is damaged (size or checksum mismatch)"
                    inner = memoryview(data)
                    problem = walk(inner, 0, len(inner), True)
                    if problem:
                        return f"inside the chunk at byte {pos}: {problem}"
                elif op in (OP_DATA_END, OP_FOOTER) and not in_chunk:
                    res.finished = True
                    return ""
            except (struct.error, ValueError, UnicodeDecodeError) as exc:
                return f"record 0x{op:02x} at byte {pos} is malformed: {exc}"
            pos = body_end
        return "" if in_chunk else f"file ends after {pos} bytes without a footer (writer did not finish)"

    res.problem = walk(view, pos, n, False)
    return res
