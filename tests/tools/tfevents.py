#!/usr/bin/env python3
"""A TensorBoard event-file reader written from the formats' specifications,
sharing nothing with zerotrain's writer (engine/monitor/tensorboard.c):

- TFRecord framing (tensorflow/core/lib/io/record_writer.cc): u64 length,
  u32 masked CRC32C of those 8 bytes, the data, u32 masked CRC32C of the data,
  all little-endian. CRC32C is the Castagnoli CRC (RFC 3720 appendix B.4:
  reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF; check value
  of b"123456789" is 0xE3069283); mask(c) = ((c >> 15 | c << 17) + 0xA282EAD8)
  mod 2^32.
- Protocol buffers wire format (protobuf.dev/programming-guides/encoding):
  tag = field << 3 | wire type; 0 varint, 1 fixed64, 2 length-delimited,
  5 fixed32.
- event.proto: Event { double wall_time = 1; int64 step = 2; string
  file_version = 3; Summary summary = 5; }; summary.proto: Summary { repeated
  Value value = 1; } Value { string tag = 1; float simple_value = 2; }.

  tfevents.py dump FILE           one JSON line per event (CRCs checked)
  tfevents.py selftest            the CRC32C check value, a hand-made record
Exit status 1 with a message on any framing, CRC or decoding error.
"""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class BadFile(Exception):
    pass


def records(blob):
    pos = 0
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise BadFile(f"truncated record header at byte {pos}")
        head = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", head)
        (head_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if head_crc != masked(crc32c(head)):
            raise BadFile(f"length CRC mismatch at byte {pos}")
        start = pos + 12
        end = start + length
        if end + 4 > len(blob):
            raise BadFile(f"truncated record at byte {pos}")
        data = blob[start:end]
        (data_crc,) = struct.unpack("<I", blob[end:end + 4])
        if data_crc != masked(crc32c(data)):
            raise BadFile(f"data CRC mismatch in the record at byte {pos}")
        yield data
        pos = end + 4


def varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise BadFile("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def fields(buf):
    """(field number, wire type, value) of a message; value is an int, or the
    bytes of a length-delimited or fixed field."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise BadFile(f"unexpected wire type {wire}")
        if pos > len(buf):
            raise BadFile("field runs past its message")
        yield field, wire, value


def event(data):
    out = {"step": 0, "values": []}
    for field, wire, value in fields(data):
        if field == 1 and wire == 1:
            out["wall_time"] = struct.unpack("<d", value)[0]
        elif field == 2 and wire == 0:
            out["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif field == 3 and wire == 2:
            out["file_version"] = value.decode()
        elif field == 5 and wire == 2:
            for vfield, vwire, vbytes in fields(value):
                if vfield != 1 or vwire != 2:
                    continue
                item = {}
                for f, w, v in fields(vbytes):
                    if f == 1 and w == 2:
                        item["tag"] = v.decode()
                    elif f == 2 and w == 5:
                        item["simple_value"] = struct.unpack("<f", v)[0]
                out["values"].append(item)
    return out


def selftest():
    if crc32c(b"123456789") != 0xE3069283:
        raise BadFile("CRC32C check value")
    # Event{wall_time=1.5, step=300, summary{value{tag="a/b", simple_value=0.25}}}
    value = b"\x0a\x03a/b" + b"\x15" + struct.pack("<f", 0.25)
    summary = b"\x0a" + bytes([len(value)]) + value
    data = b"\x09" + struct.pack("<d", 1.5) + b"\x10\xac\x02" + b"\x2a" + bytes([len(summary)]) + summary
    head = struct.pack("<Q", len(data))
    blob = head + struct.pack("<I", masked(crc32c(head))) + data + struct.pack("<I", masked(crc32c(data)))
    (got,) = [event(r) for r in records(blob)]
    if got != {"step": 300, "wall_time": 1.5, "values": [{"tag": "a/b", "simple_value": 0.25}]}:
        raise BadFile(f"selftest decoded {got}")
    broken = bytearray(blob)
    broken[20] ^= 1
    try:
        list(records(bytes(broken)))
    except BadFile:
        return
    raise BadFile("a flipped bit went unnoticed")


def main():
    try:
        if sys.argv[1:2] == ["selftest"]:
            selftest()
            print("ok: selftest")
            return 0
        if len(sys.argv) != 3 or sys.argv[1] != "dump":
            print(__doc__, file=sys.stderr)
            return 2
        with open(sys.argv[2], "rb") as f:
            blob = f.read()
        for data in records(blob):
            print(json.dumps(event(data)))
        return 0
    except BadFile as e:
        print(f"tfevents.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
