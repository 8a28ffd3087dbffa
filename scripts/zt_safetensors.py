#!/usr/bin/python3
"""The safetensors format in plain Python (numpy only): read and write.

A safetensors file is an 8-byte little-endian header length N, N bytes of
JSON {"NAME": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}, then the tensors' raw little-endian bytes
(offsets relative to the end of the header). zerotrain writes it with
`zerotrain consolidate --format safetensors` and reads it with --init-from;
scripts/zt_torch.py builds PyTorch models from it (docs/interop.md).

    read(path)  -> (dict name -> numpy array, metadata dict)
    write(path, tensors, metadata=None)   tensors: dict name -> numpy array

read holds a file to the format's rules, as --init-from does
(engine/ckpt/safetensors.h): a header length within the file and under
100 MB, a UTF-8 JSON object without a key twice, __metadata__ mapping
strings to strings, each entry a dtype of the format with a shape of
non-negative integers and data_offsets [begin, end] spanning exactly its
elements' bytes, and the entries, sorted by offset, lying end to end from the
data's first byte to the file's last (no overlap, no hole, no trailing
bytes). Anything else raises FormatError naming the file and the entry.
"""
import json
import struct

import numpy as np

DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
          "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1",
          "BOOL": "?", "C64": "<c8"}
# Bits of one element of every dtype the format defines (BF16 is read
# widened to float32; the 4-, 6- and 8-bit floats are refused as unreadable).
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
              "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
              "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}
MAX_HEADER = 100_000_000  # the format's limit
MAX_DIMS = 32  # numpy's


class FormatError(ValueError):
    """The file is not a valid safetensors file."""


class _BadJSON(Exception):
    pass


def _unique(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _BadJSON(f"key '{k}' appears twice")
        out[k] = v
    return out


def _no_constant(name):
    raise _BadJSON(f"{name} is not JSON")


def strict_json(text):
    """json.loads of text (str), refusing what the format's JSON refuses (a key
    twice in an object, NaN and Infinity); every failure, a nesting too deep
    for Python and an integer too long for it included, is a FormatError
    saying why."""
    try:
        return json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except _BadJSON as e:
        raise FormatError(str(e)) from None
    except RecursionError:
        raise FormatError("JSON nested too deeply to read") from None
    except ValueError as e:  # json.JSONDecodeError, an integer of over 4300 digits
        raise FormatError(f"JSON: {e}") from None


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _entry(name, e, data_bytes, bad):
    """(dtype, shape, begin, end) of one header entry, checked alone."""
    if not isinstance(e, dict):
        raise bad(f"entry '{name}' is not an object {{\"dtype\", \"shape\", \"data_offsets\"}}")
    dtype, shape, off = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if not isinstance(dtype, str):
        raise bad(f"entry '{name}' has no 'dtype' string")
    if dtype not in DTYPE_BITS:
        raise bad(f"entry '{name}': dtype '{dtype[:32]}' is not a dtype of the safetensors "
                  f"format")
    if not isinstance(shape, list):
        raise bad(f"entry '{name}' has no 'shape' list")
    if len(shape) > MAX_DIMS:
        raise bad(f"entry '{name}' has {len(shape)} dimensions; at most {MAX_DIMS} are read")
    for d, s in enumerate(shape):
        if not _is_int(s) or s < 0:
            raise bad(f"entry '{name}': dimension {d} of its shape is not a non-negative "
                      f"integer")
    numel = 1
    for s in shape:  # dimension by dimension, as a 64-bit reader multiplies
        numel *= s
        if numel >= 1 << 63:
            raise bad(f"entry '{name}': the element count of shape {shape} overflows 64 bits")
    if not (isinstance(off, list) and len(off) == 2 and all(_is_int(x) for x in off)):
        raise bad(f"entry '{name}' has no 'data_offsets' [begin, end] of two integers")
    begin, end = off
    if not 0 <= begin <= end:
        raise bad(f"entry '{name}': data_offsets [{begin}, {end}] are not 0 <= begin <= end")
    bits = numel * DTYPE_BITS[dtype]
    if bits % 8:
        raise bad(f"entry '{name}': {dtype} {shape} does not fill whole bytes")
    if bits // 8 != end - begin:
        raise bad(f"entry '{name}': data_offsets [{begin}, {end}] hold {end - begin} bytes; "
                  f"{dtype} {shape} is {bits // 8} bytes")
    if end > data_bytes:
        raise bad(f"entry '{name}': data_offsets [{begin}, {end}] lie past the end of the "
                  f"file's {data_bytes} data bytes (truncated?)")
    return dtype, tuple(shape), begin, end


def _layout(entries, data_bytes, bad):
    """The format's layout: sorted by offset, the entries lie end to end over
    the whole data (what each entry alone cannot show)."""
    if not entries:
        if data_bytes:
            raise bad(f"no tensors, yet {data_bytes} data bytes follow the header")
        return
    at, prev = 0, None
    for name, (_, _, begin, end) in sorted(entries.items(),
                                           key=lambda x: (x[1][2], x[1][3], x[0])):
        if begin < at:
            raise bad(f"entries '{prev[0]}' and '{name}' overlap: bytes [{prev[1]}, {prev[2]}) "
                      f"and [{begin}, {end}) of the data (the format lays tensors end to end)")
        if begin > at and prev:
            raise bad(f"bytes [{at}, {begin}) of the data belong to no entry: a hole between "
                      f"'{prev[0]}' and '{name}'")
        if begin > at:
            raise bad(f"bytes [0, {begin}) of the data belong to no entry: a hole before the "
                      f"first entry '{name}'")
        at, prev = end, (name, begin, end)
    if at != data_bytes:
        raise bad(f"bytes [{at}, {data_bytes}) of the data belong to no entry: "
                  f"{data_bytes - at} trailing bytes after the last entry '{prev[0]}'")


def _array(name, buf, dtype, shape, bad):
    if dtype == "BF16":
        u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
        arr = u.view(np.float32)
    elif dtype in DTYPES:
        arr = np.frombuffer(buf, dtype=DTYPES[dtype])
    else:
        raise bad(f"entry '{name}': dtype {dtype} is not one this reader reads")
    return arr.reshape(shape)


def read(path):
    """All tensors of path as numpy arrays (BF16 widened to float32) and the
    metadata dict; FormatError when the file breaks the format's rules."""
    with open(path, "rb") as f:
        raw = f.read()

    def bad(what):
        return FormatError(f"{path} is not a valid safetensors file: {what}")

    if len(raw) < 8:
        raise bad("shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER:
        raise bad(f"header length {n} is over the format's limit of {MAX_HEADER} bytes")
    if 8 + n > len(raw):
        raise bad(f"header length {n} does not fit the file's {len(raw)} bytes")
    if n < 2:
        raise bad(f"header length {n} cannot hold a JSON object")
    if raw[8:9] != b"{":
        raise bad("the header is not a JSON object (its first byte is not '{')")
    try:
        header = strict_json(raw[8:8 + n].decode("utf-8"))
    except UnicodeDecodeError as e:
        raise bad(f"the header is not UTF-8 (byte {e.start}: {e.reason})") from None
    except FormatError as e:
        raise bad(f"header {e}") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict):
        raise bad("__metadata__ is not an object of strings")
    for k, v in meta.items():
        if not isinstance(v, str):
            raise bad(f"__metadata__ key '{k[:60]}' holds a value that is not a string")
    entries = {name: _entry(name, e, len(data), bad) for name, e in header.items()}
    _layout(entries, len(data), bad)
    tensors = {name: _array(name, data[b:e], dtype, shape, bad)
               for name, (dtype, shape, b, e) in entries.items()}
    return tensors, meta


def _dtype_name(arr):
    for name, code in DTYPES.items():
        if np.dtype(code) == arr.dtype.newbyteorder("<") or np.dtype(code) == arr.dtype:
            return name
    raise TypeError(f"no safetensors dtype for numpy {arr.dtype}")


def write(path, tensors, metadata=None, bf16=()):
    """tensors: dict name -> numpy array, written in the dict's order.
    Names in bf16 are stored as BF16 (rounded to nearest even)."""
    header, chunks, at = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        if name in bf16:
            u = arr.astype(np.float32).view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
            dtype, b = "BF16", u.tobytes()
        else:
            dtype = _dtype_name(arr)
            b = arr.astype(DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [at, at + len(b)]}
        chunks.append(b)
        at += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in chunks:
            f.write(b)
