"""The ledger's copies of the ComputeAttestation's field list all follow its one definition
(``protocol.attestation.ATTESTATION_SPEC``): the request schema, the table's columns, the
intake's rows and group statement; a table model that drifts from it is refused at import."""

from __future__ import annotations

import pytest
from sqlmodel import SQLModel

from bench.harness.nodes import attestation, h
from ledger.core.models import (
    Attestation,
    AttestationPublic,
    check_signed_columns,
    signed_column,
    stored_fields,
)
from ledger.core.schemas import AttestationFields, Uint64Out
from ledger.intake import accept
from protocol.attestation import ATTESTATION_ATTRS, ATTESTATION_SPEC
from protocol.keys import NodeKey

TABLE = Attestation.__table__  # type: ignore[attr-defined]
SPEC = ATTESTATION_SPEC


def test_request_schema_columns_and_rows_are_the_spec_fields_in_order() -> None:
    assert tuple(AttestationFields.model_fields) == SPEC.names
    assert tuple(TABLE.c.keys())[: len(SPEC.fields)] == ATTESTATION_ATTRS
    assert tuple(AttestationPublic.model_fields)[: len(SPEC.fields)] == ATTESTATION_ATTRS
    assert accept._GROUP_COLUMNS[: len(SPEC.fields)] == ATTESTATION_ATTRS
    key = NodeKey.from_private_key(b"\x07" * 32)
    att = attestation(key, run_id=h("run"), round_=3, base=h("base"), result=h("result"))
    row = stored_fields(att)
    assert tuple(row) == ATTESTATION_ATTRS
    assert row["run_id"] == h("run") and row["result_checkpoint"] == h("result")
    assert row["node"] == key.address and row["round"] == 3 and row["tokens"] == 1000


def test_group_statement_declares_each_column_as_the_table_types_it() -> None:
    types = accept._GROUP_TYPES
    assert types["run_id"] == types["node"] == types["result_checkpoint"] == "varchar"
    assert types["round"] == types["inner_steps"] == types["tokens"] == "bigint"
    assert types["members"] == "text" and types["received_at"] == "timestamptz"


class _Swapped(SQLModel):  # tokens before inner_steps
    run_id: str = signed_column(SPEC, "run_id")
    round: Uint64Out = signed_column(SPEC, "round")
    node: str = signed_column(SPEC, "node")
    config_version: Uint64Out = signed_column(SPEC, "config_version")
    base_checkpoint: str = signed_column(SPEC, "base_checkpoint")
    pseudo_gradient: str = signed_column(SPEC, "pseudo_gradient")
    data_shard: str = signed_column(SPEC, "data_shard")
    tokens: Uint64Out = signed_column(SPEC, "tokens")
    inner_steps: int = signed_column(SPEC, "inner_steps")
    result_checkpoint: str = signed_column(SPEC, "result_checkpoint")
    trace_root: str = signed_column(SPEC, "trace_root")


class _Unsafe(SQLModel):  # round without the wallet-safe JSON type of a uint64
    run_id: str = signed_column(SPEC, "run_id")
    round: int = signed_column(SPEC, "round")
    node: str = signed_column(SPEC, "node")
    config_version: Uint64Out = signed_column(SPEC, "config_version")
    base_checkpoint: str = signed_column(SPEC, "base_checkpoint")
    pseudo_gradient: str = signed_column(SPEC, "pseudo_gradient")
    data_shard: str = signed_column(SPEC, "data_shard")
    inner_steps: int = signed_column(SPEC, "inner_steps")
    tokens: Uint64Out = signed_column(SPEC, "tokens")
    result_checkpoint: str = signed_column(SPEC, "result_checkpoint")
    trace_root: str = signed_column(SPEC, "trace_root")


def test_a_table_model_that_drifts_from_the_spec_is_refused() -> None:
    check_signed_columns(AttestationPublic, TABLE, SPEC)  # the real one passes
    with pytest.raises(TypeError, match=r"declare ComputeAttestation's fields \['run_id'"):
        check_signed_columns(_Swapped, TABLE, SPEC)
    with pytest.raises(TypeError, match=r"_Unsafe.round is ComputeAttestation's uint64"):
        check_signed_columns(_Unsafe, TABLE, SPEC)
