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
"""
import json
import struct

import numpy as np

DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
          "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
MAX_HEADER = 100 << 20


class FormatError(ValueError):
    """The file is not a valid safetensors file."""


def read(path):
    """All tensors of path as numpy arrays (BF16 widened to float32) and the
    metadata dict."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise FormatError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER or 8 + n > len(raw):
        raise FormatError(f"{path}: header length {n} does not fit the file's {len(raw)} bytes")
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise FormatError(f"{path}: tensor {name}: data_offsets past the end of the file")
        buf = data[begin:end]
        shape = tuple(e["shape"])
        if e["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif e["dtype"] in DTYPES:
            arr = np.frombuffer(buf, dtype=DTYPES[e["dtype"]])
        else:
            raise FormatError(f"{path}: tensor {name}: dtype {e['dtype']} not supported here")
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise FormatError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        tensors[name] = arr.reshape(shape)
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
