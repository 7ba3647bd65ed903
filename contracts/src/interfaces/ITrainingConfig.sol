// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title ITrainingConfig
/// @notice The training parameters token holders govern. Trainers read `current()` and `version()`
/// at the start of every outer round; every change bumps `version` by one.
interface ITrainingConfig {
    /// @notice One full set of training parameters.
    /// @dev `*E6` fields are fixed-point millionths (1e-3 == 1000). `wireFormat`: 0 fp32, 1 bf16,
    /// 2 int8. `traceInterval`: inner steps between two committed boundary states of a round (the
    /// attestation's traceRoot, reference/trace.py). `dataMixtureBps[i]` is the weight of data source i in basis points (sum 10000).
    /// `dataRoot` names the run's data by content: the root of the manifest of the corpus' files
    /// (reference/manifest.py); nodes refuse to train, and the ledger to score, on other data.
    struct Config {
        uint32 innerSteps;
        uint32 innerLrE6;
        uint32 traceInterval;
        uint32 outerLrE6;
        uint32 outerMomentumE6;
        uint8 wireFormat;
        uint32 maxNodes;
        uint256 minStake;
        uint256 rewardPerRound;
        uint16[] dataMixtureBps;
        bytes32 dataRoot;
        bytes32 releasedCheckpoint;
        string releasedCheckpointURI;
    }

    /// @notice A field group changed; `field` is its ASCII name, left-aligned (e.g. "minStake").
    /// @param version The version after the change.
    /// @param field The field group that changed.
    event ConfigUpdated(uint64 indexed version, bytes32 indexed field);

    /// @notice `innerSteps` is 0 or above `MAX_INNER_STEPS`.
    error InvalidInnerSteps(uint32 innerSteps);
    /// @notice `traceInterval` is 0 or above `MAX_TRACE_INTERVAL`.
    error InvalidTraceInterval(uint32 traceInterval);
    /// @notice A learning rate is 0 or above its bound.
    error InvalidLearningRate(bytes32 field, uint32 valueE6);
    /// @notice The outer momentum is 1.0 (1e6) or more.
    error InvalidMomentum(uint32 outerMomentumE6);
    /// @notice `wireFormat` is not 0 (fp32), 1 (bf16) or 2 (int8).
    error InvalidWireFormat(uint8 wireFormat);
    /// @notice `maxNodes` is 0 or above `MAX_NODES`.
    error InvalidMaxNodes(uint32 maxNodes);
    /// @notice `minStake` is 0.
    error InvalidMinStake(uint256 minStake);
    /// @notice `rewardPerRound` is above `MAX_REWARD_PER_ROUND`.
    error InvalidRewardPerRound(uint256 rewardPerRound);
    /// @notice The mixture is empty, longer than `MAX_DATA_SOURCES`, or does not sum to 10000.
    error InvalidDataMixture(uint256 length, uint256 sumBps);
    /// @notice The data root is zero (a run must name its data).
    error InvalidDataRoot(bytes32 dataRoot);
    /// @notice A released checkpoint needs a non-zero hash and a URI of 1..`MAX_URI_LENGTH` bytes.
    error InvalidReleasedCheckpoint(bytes32 checkpoint, uint256 uriLength);

    /// @notice Number of changes since deployment (starts at 1).
    function version() external view returns (uint64);

    /// @notice The whole current configuration.
    function current() external view returns (Config memory);

    /// @notice Minimum native-currency stake for a node to count as active (cheap single read).
    function minStake() external view returns (uint256);

    /// @notice The governed reward per round: the cap on each commit's reward total.
    function rewardPerRound() external view returns (uint256);

    /// @notice Sets the inner loop: AdamW steps per round (H) and inner learning rate.
    function setInnerLoop(uint32 innerSteps, uint32 innerLrE6) external;

    /// @notice Sets the inner steps between two committed boundary states (the round's trace).
    function setTraceInterval(uint32 traceInterval) external;

    /// @notice Sets the outer Nesterov optimizer: learning rate and momentum.
    function setOuterOptimizer(uint32 outerLrE6, uint32 outerMomentumE6) external;

    /// @notice Sets the pseudo-gradient wire format (0 fp32, 1 bf16, 2 int8).
    function setWireFormat(uint8 wireFormat) external;

    /// @notice Sets the maximum number of nodes in one round.
    function setMaxNodes(uint32 maxNodes) external;

    /// @notice Sets the minimum stake (wei) for a node to be active.
    function setMinStake(uint256 minStake) external;

    /// @notice Sets the ModelShareToken units paid out per settled round.
    function setRewardPerRound(uint256 rewardPerRound) external;

    /// @notice Sets the data mixture weights in basis points (must sum to 10000).
    function setDataMixture(uint16[] calldata dataMixtureBps) external;

    /// @notice Pins the run's data: the manifest root of the corpus nodes train on.
    function setDataRoot(bytes32 dataRoot) external;

    /// @notice Releases a checkpoint: its canonical hash and where to fetch it.
    function releaseCheckpoint(bytes32 checkpoint, string calldata uri) external;
}
