"""The one exception hierarchy of the whole project.

Every error coloco raises on purpose derives from :class:`ColocoError`. Messages say what was
wrong and what to do about it; callers (CLI, ledger API) map the class to an exit code or an
HTTP status and the ``code`` attribute to a machine-readable error code.
"""

from __future__ import annotations


class ColocoError(Exception):
    """Base of every error coloco raises on purpose."""

    code: str = "coloco_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConfigError(ColocoError):
    """A setting, flag or config file is missing, malformed or unsafe."""

    code = "config_error"


# --- protocol: encoding, signatures, hashing, keys ---------------------------------------------


class ProtocolError(ColocoError):
    """Bytes that are signed, hashed or committed do not follow the protocol."""

    code = "protocol_error"


class EncodingError(ProtocolError):
    """A field has the wrong type, range or form (names the field)."""

    code = "invalid_field"


class SignatureError(ProtocolError):
    """A signature is malformed, malleable, or recovers to the wrong signer."""

    code = "bad_signature"


class MerkleError(ProtocolError):
    """A rewards tree cannot be built or a proof does not verify."""

    code = "merkle_error"


class KeystoreError(ProtocolError):
    """A keystore cannot be read or decrypted."""

    code = "keystore_error"


# --- chain ---------------------------------------------------------------------------------------


class ChainError(ColocoError):
    """The chain could not be reached or refused a call."""

    code = "chain_error"


class RpcUnavailableError(ChainError):
    """The RPC endpoint does not answer (after retries)."""

    code = "rpc_unavailable"


class ContractRevertError(ChainError):
    """A call or transaction reverted; carries the custom error's name and arguments."""

    code = "contract_revert"

    def __init__(
        self,
        message: str,
        *,
        error_name: str | None = None,
        error_args: tuple[object, ...] = (),
        error_arg_names: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.error_name = error_name
        self.error_args = error_args
        self.error_arg_names = error_arg_names  # the ABI's names of `error_args` ('' if unnamed)


class DeploymentError(ChainError):
    """A deployment JSON or forge artifact is missing or does not match the chain."""

    code = "deployment_error"


# --- ledger --------------------------------------------------------------------------------------


class LedgerError(ColocoError):
    """The ledger service refused or could not process a request."""

    code = "ledger_error"


class AttestationRejected(LedgerError):
    """An attestation failed verification; ``code`` says which check."""

    code = "attestation_rejected"


class SettlementError(LedgerError):
    """A round could not be scored or committed."""

    code = "settlement_error"


class LedgerUnavailableError(LedgerError):
    """The ledger's HTTP API could not be reached (after retries)."""

    code = "ledger_unavailable"


# --- trainer -------------------------------------------------------------------------------------


class TrainerError(ColocoError):
    """The trainer cannot go on."""

    code = "trainer_error"


class CollectiveError(TrainerError):
    """A torch.distributed collective failed or timed out; the round's sync did not happen."""

    code = "collective_error"


class ForgedPacketError(CollectiveError):
    """A peer's all-reduce packet is not the one it signed a commitment to (or it signed none):
    nothing of it was used; the round re-forms without ``offenders``."""

    code = "forged_packet"

    def __init__(self, offenders: tuple[str, ...], message: str) -> None:
        self.offenders = offenders
        super().__init__(message)


class CheckpointError(TrainerError):
    """A checkpoint is missing, corrupt, or its hash disagrees with the committed one."""

    code = "checkpoint_error"


class DataError(TrainerError):
    """The corpus or a shard cannot be built."""

    code = "data_error"
