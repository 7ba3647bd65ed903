// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @notice What a trainer node signs (EIP-712) for one outer round. Field order is part of the
/// type hash: see docs/interfaces.md.
struct ComputeAttestation {
    bytes32 runId;
    uint64 round;
    address node;
    uint64 configVersion;
    bytes32 baseCheckpoint;
    bytes32 pseudoGradient;
    bytes32 dataShard;
    uint32 innerSteps;
    uint64 tokens;
    bytes32 resultCheckpoint;
}

/// @title IContributionLedger
/// @notice One commitment per (run, round) from the ledger operator: the cumulative rewards root,
/// the resulting checkpoint and a root over the round's attestations. Also the EIP-712 domain
/// (name "coloco", version "1") under which nodes sign `ComputeAttestation`s.
interface IContributionLedger {
    /// @notice A round was committed. Carries everything an indexer needs.
    /// @param runId The run.
    /// @param round The outer round (0 = genesis).
    /// @param rewardsRoot Root of the cumulative rewards tree (zero: no rewards settled yet).
    /// @param checkpointHash Canonical hash of the weights after this round.
    /// @param totalWork Verified work credited in this round (ledger units).
    /// @param attestationsRoot Root over the attestations accepted for this round.
    event RoundCommitted(
        bytes32 indexed runId,
        uint64 indexed round,
        bytes32 rewardsRoot,
        bytes32 checkpointHash,
        uint256 totalWork,
        bytes32 attestationsRoot
    );

    /// @notice `round` is not above the run's last committed round.
    error RoundNotIncreasing(bytes32 runId, uint64 round, uint64 lastRound);
    /// @notice A commit must carry a non-zero checkpoint hash.
    error ZeroCheckpoint(bytes32 runId, uint64 round);
    /// @notice The signature is malformed (wrong length or non-canonical s).
    error InvalidSignature(bytes signature);
    /// @notice The signature recovers to `signer`, not to the attestation's `node`.
    error WrongSigner(address signer, address node);

    /// @notice The EIP-712 type hash of `ComputeAttestation`.
    function ATTESTATION_TYPEHASH() external view returns (bytes32);

    /// @notice The role allowed to commit rounds.
    function COMMITTER_ROLE() external view returns (bytes32);

    /// @notice Commits round `round` of `runId`. Only COMMITTER_ROLE. The first commit of a run
    /// may be round 0 (genesis); later rounds must strictly increase. A non-zero `rewardsRoot`
    /// becomes `latestRewardsRoot`; a zero one (genesis, nothing settled) leaves it unchanged.
    function commitRound(
        bytes32 runId,
        uint64 round,
        bytes32 rewardsRoot,
        bytes32 checkpointHash,
        uint256 totalWork,
        bytes32 attestationsRoot
    ) external;

    /// @notice The last committed round of `runId` (0 if none: check `hasCommitted`).
    function lastRound(bytes32 runId) external view returns (uint64);

    /// @notice Whether `runId` has at least one commit.
    function hasCommitted(bytes32 runId) external view returns (bool);

    /// @notice The checkpoint hash committed for (`runId`, `round`), zero if none.
    function checkpointOf(bytes32 runId, uint64 round) external view returns (bytes32);

    /// @notice The root that reward claims prove against.
    function latestRewardsRoot() external view returns (bytes32);

    /// @notice The EIP-712 digest of `att` under this contract's domain.
    function hashAttestation(ComputeAttestation calldata att) external view returns (bytes32);

    /// @notice Recovers the signer of `att` and checks it is `att.node`; reverts otherwise.
    function verifyAttestation(ComputeAttestation calldata att, bytes calldata signature)
        external
        view
        returns (address signer);
}
