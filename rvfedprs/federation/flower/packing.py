"""Named numpy arrays packed into one byte buffer, and back, bit for bit.

Flower moves a message's arrays one object at a time (an HTTP round trip per array between
the SuperNode and its ClientApp), so a message with one array per tensor pays one trip per
tensor. :func:`pack_arrays` puts all of them in one buffer that travels as a single array:

- 8 bytes: the header's length, unsigned little-endian;
- the header: UTF-8 JSON, a list of ``[name, descr, shape]`` in the mapping's order (``descr``:
  the dtype as :func:`numpy.lib.format.dtype_to_descr` writes it, byte order included);
- each array's bytes in C order, one after the other, in the same order.

:func:`unpack_arrays` gives back the same names, order, dtypes, shapes and bytes (0-d and
empty arrays included), and refuses a buffer whose header and length disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from numpy.lib.format import descr_to_dtype, dtype_to_descr

__all__ = ["pack_arrays", "unpack_arrays"]

_LENGTH_BYTES = 8


def pack_arrays(arrays: Mapping[str, np.ndarray]) -> bytes:
    """The buffer holding every named array (see the module's layout).

    Raises
    ------
    TypeError
        For an array of Python objects (it has no bytes to send) or of a structured dtype,
        naming it.
    """
    header, chunks = [], []
    for name, value in arrays.items():
        array = np.asarray(value)
        if array.dtype.hasobject or array.dtype.fields is not None:
            raise TypeError(
                f"array {name!r} has dtype {array.dtype}: only plain (not object or "
                "structured) dtypes can be packed"
            )
        header.append([str(name), dtype_to_descr(array.dtype), list(array.shape)])
        chunks.append(array.tobytes(order="C"))
    text = json.dumps(header).encode("utf-8")
    return b"".join([len(text).to_bytes(_LENGTH_BYTES, "little"), text, *chunks])


def unpack_arrays(buffer: bytes | memoryview | np.ndarray) -> dict[str, np.ndarray]:
    """Inverse of :func:`pack_arrays`: the named arrays, in order (writable copies).

    Raises
    ------
    ValueError
        When the buffer is not such a layout: too short for its header, an unreadable header
        (or one repeating a name, or a negative size), or arrays that do not fill the buffer
        exactly (the message says which and by how much).
    """
    data = memoryview(buffer).cast("B")
    if len(data) < _LENGTH_BYTES:
        raise ValueError(f"packed arrays: {len(data)} bytes, too short for a header")
    start = _LENGTH_BYTES + int.from_bytes(data[:_LENGTH_BYTES], "little")
    if start > len(data):
        raise ValueError(f"packed arrays: header ends at byte {start} of {len(data)}")
    try:
        header = json.loads(bytes(data[_LENGTH_BYTES:start]).decode("utf-8"))
        layout = [
            (str(n), descr_to_dtype(d), tuple(int(s) for s in shape)) for n, d, shape in header
        ]
    except (ValueError, TypeError) as exc:
        raise ValueError(f"packed arrays: unreadable header ({exc})") from None
    names = [name for name, _, _ in layout]
    if len(set(names)) != len(names):
        raise ValueError(f"packed arrays: the header repeats names {sorted(names)}")
    arrays: dict[str, np.ndarray] = {}
    offset = start
    for name, dtype, shape in layout:
        if any(size < 0 for size in shape):
            raise ValueError(f"packed arrays: array {name!r} has shape {shape}")
        count = int(np.prod(shape, dtype=np.int64))
        end = offset + count * dtype.itemsize
        if end > len(data):
            raise ValueError(
                f"packed arrays: array {name!r} {dtype} {shape} needs bytes {offset}-{end}, "
                f"the buffer has {len(data)}"
            )
        flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
        arrays[name] = flat.reshape(shape).copy()
        offset = end
    if offset != len(data):
        raise ValueError(f"packed arrays: {len(data) - offset} bytes left after the last array")
    return arrays
