// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {ComputeAttestation, IContributionLedger} from "./interfaces/IContributionLedger.sol";

/// @title ContributionLedger
/// @notice Round commitments of the ledger operator and the EIP-712 domain of attestations.
/// @dev `commitRound` stores three words whatever the number of nodes in the round: the run's
/// (lastRound, committed) slot, the round's checkpoint and, if non-zero, the latest rewards root.
/// Everything else travels in the `RoundCommitted` event.
contract ContributionLedger is IContributionLedger, AccessControl, EIP712 {
    /// @inheritdoc IContributionLedger
    bytes32 public constant COMMITTER_ROLE = keccak256("COMMITTER_ROLE");

    /// @inheritdoc IContributionLedger
    bytes32 public constant ATTESTATION_TYPEHASH = keccak256(
        "ComputeAttestation(bytes32 runId,uint64 round,address node,uint64 configVersion,"
        "bytes32 baseCheckpoint,bytes32 pseudoGradient,bytes32 dataShard,uint32 innerSteps,"
        "uint64 tokens,bytes32 resultCheckpoint)"
    );

    /// @dev Packed in one slot: the last committed round and whether any commit exists.
    struct RunState {
        uint64 lastRound;
        bool committed;
    }

    mapping(bytes32 runId => RunState) private _runs;
    mapping(bytes32 runId => mapping(uint64 round => bytes32)) private _checkpoints;

    /// @inheritdoc IContributionLedger
    bytes32 public latestRewardsRoot;

    /// @param admin Holder of DEFAULT_ADMIN_ROLE (grants COMMITTER_ROLE; the Timelock after setup).
    constructor(address admin) EIP712("coloco", "1") {
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
    }

    /// @inheritdoc IContributionLedger
    function commitRound(
        bytes32 runId,
        uint64 round,
        bytes32 rewardsRoot,
        bytes32 checkpointHash,
        uint256 totalWork,
        bytes32 attestationsRoot
    ) external onlyRole(COMMITTER_ROLE) {
        RunState memory run = _runs[runId];
        if (run.committed && round <= run.lastRound) {
            revert RoundNotIncreasing(runId, round, run.lastRound);
        }
        if (checkpointHash == bytes32(0)) revert ZeroCheckpoint(runId, round);
        _runs[runId] = RunState({lastRound: round, committed: true});
        _checkpoints[runId][round] = checkpointHash;
        if (rewardsRoot != bytes32(0)) latestRewardsRoot = rewardsRoot;
        emit RoundCommitted(runId, round, rewardsRoot, checkpointHash, totalWork, attestationsRoot);
    }

    /// @inheritdoc IContributionLedger
    function lastRound(bytes32 runId) external view returns (uint64) {
        return _runs[runId].lastRound;
    }

    /// @inheritdoc IContributionLedger
    function hasCommitted(bytes32 runId) external view returns (bool) {
        return _runs[runId].committed;
    }

    /// @inheritdoc IContributionLedger
    function checkpointOf(bytes32 runId, uint64 round) external view returns (bytes32) {
        return _checkpoints[runId][round];
    }

    /// @inheritdoc IContributionLedger
    function hashAttestation(ComputeAttestation calldata att) public view returns (bytes32) {
        return _hashTypedDataV4(
            keccak256(
                abi.encode(
                    ATTESTATION_TYPEHASH,
                    att.runId,
                    att.round,
                    att.node,
                    att.configVersion,
                    att.baseCheckpoint,
                    att.pseudoGradient,
                    att.dataShard,
                    att.innerSteps,
                    att.tokens,
                    att.resultCheckpoint
                )
            )
        );
    }

    /// @inheritdoc IContributionLedger
    function verifyAttestation(ComputeAttestation calldata att, bytes calldata signature)
        external
        view
        returns (address signer)
    {
        ECDSA.RecoverError err;
        (signer, err,) = ECDSA.tryRecover(hashAttestation(att), signature);
        if (err != ECDSA.RecoverError.NoError) revert InvalidSignature(signature);
        if (signer != att.node) revert WrongSigner(signer, att.node);
    }
}
