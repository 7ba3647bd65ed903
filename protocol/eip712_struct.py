"""One declaration per signed struct: everything else about it follows from its field list.

A struct is declared once as (python attribute, EIP-712 name, Solidity type) triples in struct
order. :class:`StructSpec` derives from that list the type string and typehash, the validation of
each field, ``hashStruct``, the camelCase wire JSON (wallet-safe integers), its strict parser, and
the eth_signTypedData_v4 JSON. :class:`Eip712Struct` gives a frozen dataclass those methods from
its ``SPEC``. Only static field types are supported: ``bytes32``, ``address`` and ``uintN``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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


def sol_of(f: Field) -> str:
    return f[2]


def _inline_word(sol: str, value: str, index: int) -> str:
    """One field's 32-byte word in ``hashStruct`` as an expression on ``value``, the same
    bytes as that type's encoder (``encode{index}``) without a Python call per field: a
    field was checked when the struct was built (a bytes32 is 32 bytes, an address 0x + 40
    hex digits, a uint in range)."""
    if sol == "bytes32":
        return value
    if sol == "address":
        return f"b'\\x00' * 12 + bytes.fromhex({value}[2:])"
    if sol.startswith("uint"):
        return f"{value}.to_bytes(32, 'big')"
    return f"encode{index}({value})"  # pragma: no cover - _codec refuses other types


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
        object.__setattr__(self, "type_string", type_string)
        object.__setattr__(self, "typehash", keccak256(type_string.encode()))
        object.__setattr__(self, "names", tuple(n for _, n, _ in self.fields))
        object.__setattr__(self, "_name_set", frozenset(self.names))
        object.__setattr__(self, "_codecs", tuple(_codec(sol) for _, _, sol in self.fields))
        object.__setattr__(self, "_hash", self._compile_hash())
        object.__setattr__(self, "_parse", self._compile_parse())

    def _compile_hash(self) -> Callable[[object], bytes]:
        """``hashStruct`` unrolled once for this field list: one expression that calls each
        field's encoder on its attribute (the same codecs as :meth:`check` and
        :meth:`parse_json`), without the loop, the zips and the getattr calls of a generic
        walk (the ledger hashes every attestation it receives)."""
        env: dict[str, Any] = {"keccak256": keccak256, "typehash": self.typehash}
        words = []
        for index, ((attr, _, _), (_, encode, _)) in enumerate(
            zip(self.fields, self._codecs, strict=True)
        ):
            if not attr.isidentifier():  # pragma: no cover - dataclass fields always are
                raise ValueError(f"field {attr!r} is not an identifier")
            env[f"encode{index}"] = encode
            words.append(_inline_word(sol_of(self.fields[index]), f"obj.{attr}", index))
        body = f"keccak256(b''.join((typehash, {', '.join(words)})))"
        source = f"def hash_struct(obj):\n    return {body}\n"
        exec(compile(source, f"<hashStruct {self.primary}>", "exec"), env)
        hash_struct: Callable[[object], bytes] = env["hash_struct"]
        return hash_struct

    def _compile_parse(self) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The field parsers of :meth:`parse_json` unrolled once for this field list, in
        field order (the first bad field is the one named, as in a loop)."""
        env: dict[str, Any] = {}
        items = []
        for index, ((attr, name, _), (_, _, parse)) in enumerate(
            zip(self.fields, self._codecs, strict=True)
        ):
            env[f"parse{index}"] = parse
            sol = sol_of(self.fields[index])
            if sol.startswith("uint"):  # an exact int in range as is; anything else (a decimal
                # string, a bool, out of range) goes to the parser, which converts or refuses
                env[f"limit{index}"] = 1 << _uint_bits(sol)
                items.append(
                    f"{attr!r}: (v{index} if type(v{index} := data[{name!r}]) is int "
                    f"and 0 <= v{index} < limit{index} else parse{index}({name!r}, v{index}))"
                )
            else:
                items.append(f"{attr!r}: parse{index}({name!r}, data[{name!r}])")
        source = f"def parse_fields(data):\n    return {{{', '.join(items)}}}\n"
        exec(compile(source, f"<parseJson {self.primary}>", "exec"), env)
        parse_fields: Callable[[dict[str, Any]], dict[str, Any]] = env["parse_fields"]
        return parse_fields

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
