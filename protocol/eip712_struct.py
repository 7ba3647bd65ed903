"""One declaration per signed struct: everything else about it follows from its field list.

A struct is declared once as (python attribute, EIP-712 name, Solidity type) triples in struct
order. :class:`StructSpec` derives from that list the type string and typehash, the validation of
each field, ``hashStruct``, the camelCase wire JSON (wallet-safe integers), its strict parser, and
the eth_signTypedData_v4 JSON. :class:`Eip712Struct` gives a frozen dataclass those methods from
its ``SPEC``. Only static field types are supported: ``bytes32``, ``address`` and ``uintN``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any, ClassVar, Final, Self, cast

from protocol.eip712 import (
    EIP712_DOMAIN_FIELDS,
    Eip712Domain,
    bytes32_hex,
    check_address,
    check_bytes32,
    check_uint,
    encode_address,
    encode_uint,
    keccak256,
    parse_bytes32,
    parse_uint,
    typed_data_digest,
    wallet_int,
)
from protocol.errors import EncodingError

Field = tuple[str, str, str]
"""(python attribute, EIP-712 name, Solidity type)."""

TYPED_DATA_KEYS: Final = frozenset({"types", "primaryType", "domain", "message"})


def _uint_bits(sol: str) -> int:
    bits = int(sol.removeprefix("uint") or "256")
    if bits % 8 or not 8 <= bits <= 256:
        raise ValueError(f"uint{bits} is not a Solidity type")
    return bits


def _codec(
    sol: str,
) -> tuple[Callable[[str, Any], Any], Callable[[Any], bytes], Callable[..., Any]]:
    """(check, encode as one 32-byte word, parse from wire JSON) for one Solidity type."""
    if sol == "bytes32":
        return check_bytes32, bytes, parse_bytes32
    if sol == "address":
        return check_address, encode_address, check_address
    if sol.startswith("uint"):
        bits = _uint_bits(sol)
        return (
            lambda name, value: check_uint(name, value, bits),
            encode_uint,
            lambda name, value: parse_uint(name, value, bits),
        )
    raise ValueError(f"unsupported EIP-712 field type {sol!r} (bytes32, address and uintN only)")


def _word_layout(sol: str) -> tuple[str, Callable[[Any], bytes] | None]:
    """One field's 32-byte word in ``hashStruct`` as a :mod:`struct` format, and the conversion
    its value needs before packing (None: it packs as is). The same bytes as that type's
    encoder in :func:`_codec`, since a field was checked when the struct was built: a bytes32 is
    32 bytes, a uint of up to 64 bits fits a big-endian ``Q`` behind 24 zero bytes, an address
    is 12 zero bytes and the 20 bytes of its hex digits, a wider uint is ``to_bytes(32)``."""
    if sol == "bytes32":
        return "32s", None
    if sol == "address":
        return "12x20s", _address_bytes
    if _uint_bits(sol) <= 64:
        return "24xQ", None
    return "32s", encode_uint


def _address_bytes(value: str) -> bytes:
    return bytes.fromhex(value[2:])


def _tuple_getter(
    getter: Callable[..., Callable[[Any], Any]], keys: tuple[str, ...]
) -> Callable[[Any], tuple[Any, ...]]:
    """``keys`` of an object in one C call (``attrgetter`` or ``itemgetter``), as a tuple even
    for a single key (for which both return the bare value)."""
    get = getter(*keys)
    if len(keys) > 1:
        return get
    return lambda obj: (get(obj),)


def _struct_hasher(typehash: bytes, fields: tuple[Field, ...]) -> Callable[[object], bytes]:
    """``hashStruct`` for one field list, laid out once: every attribute read by one
    ``attrgetter``, typehash and words packed by one precompiled :class:`struct.Struct`, and a
    Python call only for the fields whose value must be converted first (an address, a uint
    above 64 bits). The ledger hashes every attestation it receives; this is about as fast as
    one unrolled expression and needs no generated source."""
    layouts = [_word_layout(sol) for _, _, sol in fields]
    pack = struct.Struct(">32s" + "".join(fmt for fmt, _ in layouts)).pack
    converts = tuple((i, convert) for i, (_, convert) in enumerate(layouts) if convert)
    attrs = _tuple_getter(attrgetter, tuple(attr for attr, _, _ in fields))

    def hash_struct(obj: object) -> bytes:
        values = attrs(obj)
        if not converts:
            return keccak256(pack(typehash, *values))
        words = list(values)
        for i, convert in converts:
            words[i] = convert(words[i])
        return keccak256(pack(typehash, *words))

    return hash_struct


def _field_parser(
    fields: tuple[Field, ...], parsers: tuple[Callable[..., Any], ...]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The field parsers of :meth:`StructSpec.parse_json` for one field list, in field order
    (the first bad field is the one named). An exact ``int`` in range for a uint field is taken
    as is; anything else (a decimal string, a bool, out of range) goes to its parser, which
    converts or refuses."""
    limits = [1 << _uint_bits(sol) if sol.startswith("uint") else 0 for _, _, sol in fields]
    rows = tuple(
        zip((a for a, _, _ in fields), (n for _, n, _ in fields), parsers, limits, strict=True)
    )
    items = _tuple_getter(itemgetter, tuple(name for _, name, _ in fields))

    def parse_fields(data: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (attr, name, parse, limit), value in zip(rows, items(data), strict=False):
            out[attr] = value if type(value) is int and 0 <= value < limit else parse(name, value)
        return out

    return parse_fields


@dataclass(frozen=True)
class StructSpec:
    """The field list of one signed struct and everything derived from it."""

    primary: str
    fields: tuple[Field, ...]
    what: str
    """How errors name the struct ("attestation", "join", ...)."""
    type_string: str = field(init=False)
    typehash: bytes = field(init=False)
    names: tuple[str, ...] = field(init=False)
    _name_set: frozenset[str] = field(init=False, repr=False, compare=False)
    _codecs: tuple[tuple[Callable[..., Any], Callable[[Any], bytes], Callable[..., Any]], ...] = (
        field(init=False, repr=False)
    )
    _hash: Callable[[object], bytes] = field(init=False, repr=False, compare=False)
    _parse: Callable[[dict[str, Any]], dict[str, Any]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        type_string = f"{self.primary}({','.join(f'{sol} {n}' for _, n, sol in self.fields)})"
        typehash = keccak256(type_string.encode())
        codecs = tuple(_codec(sol) for _, _, sol in self.fields)
        object.__setattr__(self, "type_string", type_string)
        object.__setattr__(self, "typehash", typehash)
        object.__setattr__(self, "names", tuple(n for _, n, _ in self.fields))
        object.__setattr__(self, "_name_set", frozenset(self.names))
        object.__setattr__(self, "_codecs", codecs)
        object.__setattr__(self, "_hash", _struct_hasher(typehash, self.fields))
        parsers = tuple(parse for _, _, parse in codecs)
        object.__setattr__(self, "_parse", _field_parser(self.fields, parsers))

    def check(self, obj: object) -> None:
        """Validate every field of ``obj`` (EncodingError naming the field)."""
        for (attr, name, _), (check, _, _) in zip(self.fields, self._codecs, strict=True):
            check(name, getattr(obj, attr))

    def hash(self, obj: object) -> bytes:
        """EIP-712 ``hashStruct``: keccak of the typehash and one 32-byte word per field."""
        return self._hash(obj)

    def to_json(self, obj: object) -> dict[str, Any]:
        """camelCase object: bytes32 as 0x-hex, addresses checksummed, integers as numbers up to
        2^53 - 1 and as decimal strings above (JavaScript's JSON.parse reads both exactly)."""
        out: dict[str, Any] = {}
        for attr, name, sol in self.fields:
            value = getattr(obj, attr)
            if sol == "bytes32":
                out[name] = bytes32_hex(value)
            elif sol == "address":
                out[name] = value
            else:
                out[name] = wallet_int(int(value))
        return out

    def parse_json(self, data: object) -> dict[str, Any]:
        """The constructor's keyword arguments from the wire form: exact keys, strict types."""
        if not isinstance(data, dict):
            raise EncodingError(f"{self.what}: expected an object, got {type(data).__name__}")
        if len(data) == len(self.names) and data.keys() == self._name_set:
            return self._parse(data)
        missing = [n for n in self.names if n not in data]
        unknown = sorted(set(data) - set(self.names))
        if missing or unknown:
            raise EncodingError(
                f"{self.what}: missing fields {missing}, unknown fields {unknown}; "
                f"expected exactly {list(self.names)}",
                code="invalid_field",
            )
        return self._parse(data)

    def types(self) -> dict[str, list[dict[str, str]]]:
        """The ``types`` object of eth_signTypedData_v4, ``EIP712Domain`` included."""
        return {
            "EIP712Domain": [{"name": n, "type": t} for n, t in EIP712_DOMAIN_FIELDS],
            self.primary: [{"name": n, "type": t} for _, n, t in self.fields],
        }

    def signing_schema(self, domain: Eip712Domain) -> dict[str, Any]:
        """What a wallet needs before it has a message: domain, types and primaryType."""
        return {"types": self.types(), "primaryType": self.primary, "domain": domain.to_json()}

    def parse_typed_data(self, data: object) -> tuple[dict[str, Any], Eip712Domain]:
        """Check eth_signTypedData_v4 JSON is this struct's under coloco's domain; return the
        message's keyword arguments and the domain."""
        if not isinstance(data, dict):
            raise EncodingError(f"typed data: expected an object, got {type(data).__name__}")
        if set(data) != TYPED_DATA_KEYS:
            raise EncodingError(
                f"typed data: expected exactly the keys {sorted(TYPED_DATA_KEYS)}, "
                f"got {sorted(data)}"
            )
        if data["primaryType"] != self.primary:
            raise EncodingError(
                f"typed data.primaryType: expected {self.primary!r}, got {data['primaryType']!r}"
            )
        if data["types"] != self.types():
            raise EncodingError(
                f"typed data.types: must declare exactly EIP712Domain and {self.type_string}"
            )
        return self.parse_json(data["message"]), Eip712Domain.from_json(data["domain"])


class Eip712Struct:
    """Mixin for a frozen dataclass whose fields are declared by ``SPEC``."""

    __slots__ = ()
    SPEC: ClassVar[StructSpec]

    def __post_init__(self) -> None:
        self.SPEC.check(self)

    def struct_hash(self) -> bytes:
        return self.SPEC.hash(self)

    def digest(self, domain: Eip712Domain) -> bytes:
        """The 32-byte EIP-712 digest that is signed."""
        return typed_data_digest(domain, self.SPEC.hash(self))

    def to_json(self) -> dict[str, Any]:
        return self.SPEC.to_json(self)

    @classmethod
    def from_json(cls, data: object) -> Self:
        """Parse the camelCase wire form strictly: exact keys, exact types, no coercion.

        ``parse_json`` validates every field as :meth:`StructSpec.check` would (and more), so a
        struct with no ``__post_init__`` of its own is built without checking each field twice.
        """
        kwargs = cls.SPEC.parse_json(data)
        if cls.__post_init__ is not Eip712Struct.__post_init__:
            return cast("Callable[..., Self]", cls)(**kwargs)
        obj = object.__new__(cls)
        for name, value in kwargs.items():
            object.__setattr__(obj, name, value)
        return obj

    def typed_data(self, domain: Eip712Domain) -> dict[str, Any]:
        """The full eth_signTypedData_v4 JSON (``EIP712Domain`` included in ``types``)."""
        return {**self.SPEC.signing_schema(domain), "message": self.to_json()}

    @classmethod
    def from_typed_data(cls, data: object) -> tuple[Self, Eip712Domain]:
        """Parse eth_signTypedData_v4 JSON; types, primaryType and domain must be coloco's."""
        kwargs, domain = cls.SPEC.parse_typed_data(data)
        return cast("Callable[..., Self]", cls)(**kwargs), domain
