"""One edit of a Kubernetes object in the apiserver's own protobuf encoding: a finalizer added, every other byte kept.

Why: the apiserver compares an immutable ``spec`` byte for byte, and a ResourceClaim's opaque driver parameters
(a ``RawExtension``) keep the bytes their creator sent. A merge or JSON patch re-encodes them as compact JSON, so a
claim created with any other spacing (Python's ``json.dumps``, pretty-printed JSON) refuses every patch ("spec:
field is immutable"), and JSON carries no way to send its bytes back. kube-scheduler's own finalizer write works only
because client-go speaks protobuf, where a ``RawExtension`` is its stored bytes. So sunk does the same: read the
object as protobuf, append one entry to ``metadata.finalizers`` at the wire level, and write it back as read (with
its ``resourceVersion``: a changed object is a 409).

The envelope (k8s.io/apimachinery runtime/serializer/protobuf): the magic ``k8s\\0`` then a ``runtime.Unknown``
(typeMeta 1, raw 2, contentEncoding 3, contentType 4), whose ``raw`` is the object: ``metadata`` is field 1 of every
top-level kind, and ``finalizers`` field 14 of ``ObjectMeta`` (a repeated string: an entry appended at the end of the
message is appended to the list).
"""

from __future__ import annotations

from collections.abc import Callable

MAGIC = b"k8s\x00"
_UNKNOWN_RAW = 2
_UNKNOWN_CONTENT_ENCODING = 3
_OBJECT_METADATA = 1
_META_RESOURCE_VERSION = 6
_META_FINALIZERS = 14
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not the protobuf envelope the edit expects."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise WireError("a varint runs past the end of the message")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(message: bytes) -> list[tuple[int, int, int, int, int]]:
    """Each field of ``message`` as (number, wire type, its start, the start of its payload, its end)."""
    out, at = [], 0
    while at < len(message):
        field_start = at
        key, at = _varint(message, at)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("a field numbered 0")
        start = at
        if wire == _VARINT:
            _value, at = _varint(message, at)
        elif wire == _FIXED64:
            at += 8
        elif wire == _FIXED32:
            at += 4
        elif wire == _LENGTH:
            length, start = _varint(message, at)
            at = start + length
        else:
            raise WireError(f"field {number}: wire type {wire} is not one Kubernetes objects use")
        if at > len(message):
            raise WireError(f"field {number} runs past the end of the message")
        out.append((number, wire, field_start, start, at))
    return out


def _length_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LENGTH) + _encode_varint(len(payload)) + payload


def _one(message: bytes, number: int) -> tuple[int, int, int]:
    """The (start, payload start, end) of the one length-delimited field ``number`` of ``message``."""
    found = [(field, start, end) for n, wire, field, start, end in _fields(message) if n == number and wire == _LENGTH]
    if len(found) != 1:
        raise WireError(f"field {number} appears {len(found)} times, not once")
    return found[0]


def _replace_length_field(message: bytes, number: int, edit: Callable[[bytes], bytes]) -> bytes:
    """``message`` with the payload of its one length-delimited field ``number`` replaced by ``edit(payload)``."""
    field, start, end = _one(message, number)
    return message[:field] + _length_field(number, edit(message[start:end])) + message[end:]


def _metadata(envelope: bytes) -> bytes:
    unknown = _unwrap(envelope)
    _field, start, end = _one(unknown, _UNKNOWN_RAW)
    raw = unknown[start:end]
    _field, start, end = _one(raw, _OBJECT_METADATA)
    return raw[start:end]


def _strings(envelope: bytes, number: int) -> list[str]:
    meta = _metadata(envelope)
    try:
        return [meta[s:e].decode() for n, wire, _f, s, e in _fields(meta) if n == number and wire == _LENGTH]
    except UnicodeDecodeError as exc:
        raise WireError(f"metadata field {number} is not UTF-8") from exc


def finalizers(envelope: bytes) -> list[str]:
    """The object's ``metadata.finalizers``, in order."""
    return _strings(envelope, _META_FINALIZERS)


def resource_version(envelope: bytes) -> str:
    """The object's ``metadata.resourceVersion`` ("" if none)."""
    found = _strings(envelope, _META_RESOURCE_VERSION)
    return found[-1] if found else ""


def _unwrap(envelope: bytes) -> bytes:
    if not envelope.startswith(MAGIC):
        raise WireError("not the apiserver's protobuf encoding (no k8s\\0 prefix)")
    unknown = envelope[len(MAGIC):]
    if any(n == _UNKNOWN_CONTENT_ENCODING and end > start for n, _w, _f, start, end in _fields(unknown)):
        raise WireError("the object is sent with a content encoding (compressed?): not edited")
    return unknown


def with_finalizer(envelope: bytes, finalizer: str) -> bytes:
    """``envelope`` with ``finalizer`` appended to the object's ``metadata.finalizers``; every other byte as read."""
    entry = _length_field(_META_FINALIZERS, finalizer.encode())
    unknown = _replace_length_field(
        _unwrap(envelope), _UNKNOWN_RAW,
        lambda raw: _replace_length_field(raw, _OBJECT_METADATA, lambda meta: meta + entry))
    return MAGIC + unknown
