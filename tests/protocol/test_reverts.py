"""Revert data decoded into a message a person reads: named arguments, bytes32 as 0x hex, unix
times in UTC (the issue saw `RootPending(b'$\\xe8...', 1796182341)`)."""

from __future__ import annotations

from eth_abi.abi import encode

from protocol.eip712 import keccak256
from protocol.reverts import ErrorDecoder

ROOT_PENDING = {
    "type": "error",
    "name": "RootPending",
    "inputs": [{"name": "root", "type": "bytes32"}, {"name": "finalizesAt", "type": "uint64"}],
}


def test_a_root_is_hex_and_a_time_is_utc() -> None:
    root = bytes.fromhex("24e8" + "00" * 30)
    data = keccak256(b"RootPending(bytes32,uint64)")[:4] + encode(
        ["bytes32", "uint64"], [root, 1796182341]
    )
    exc = ErrorDecoder([[ROOT_PENDING]]).decode(data, context="RunFunding.claimEth")
    assert exc.message == (
        f"RunFunding.claimEth reverted: RootPending(root=0x{root.hex()}, "
        "finalizesAt=2026-12-02 03:32:21 UTC)"
    )
    assert exc.error_args == (root, 1796182341)  # scripts still get the raw values
    assert exc.error_arg_names == ("root", "finalizesAt")
