// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {IOwnershipSplit} from "./interfaces/IOwnershipSplit.sol";
import {ITrainingConfig} from "./interfaces/ITrainingConfig.sol";

/// @title TrainingConfig
/// @notice The governed training parameters. Owned by the Timelock: every setter is a governance
/// proposal's action. Each setter validates its field group, bumps `version` and emits
/// `ConfigUpdated(version, field)`.
contract TrainingConfig is ITrainingConfig, IOwnershipSplit, Ownable {
    /// @notice Upper bound on inner steps per round (H).
    uint32 public constant MAX_INNER_STEPS = 100_000;
    /// @notice Upper bound on the inner steps between two boundaries of a round's trace.
    uint32 public constant MAX_TRACE_INTERVAL = 100_000;
    /// @notice Upper bound on the inner learning rate: 1.0.
    uint32 public constant MAX_INNER_LR_E6 = 1_000_000;
    /// @notice Upper bound on the outer learning rate: 10.0 (DiLoCo uses ~0.7).
    uint32 public constant MAX_OUTER_LR_E6 = 10_000_000;
    /// @notice The momentum must stay below 1.0.
    uint32 public constant MOMENTUM_ONE_E6 = 1_000_000;
    /// @notice The highest wire format code (0 fp32, 1 bf16, 2 int8, 3 sparse top-k).
    uint8 public constant MAX_WIRE_FORMAT = 3;
    /// @notice Upper bound on nodes per round.
    uint32 public constant MAX_NODES = 65_536;
    /// @notice Upper bound on the reward per round: one million tokens (18 decimals).
    uint256 public constant MAX_REWARD_PER_ROUND = 1_000_000e18;
    /// @notice Upper bound on the number of data sources.
    uint256 public constant MAX_DATA_SOURCES = 32;
    /// @notice A mixture sums to 10000 basis points.
    uint256 public constant BPS = 10_000;
    /// @notice The default corpus' data root: the shipped standard-library snapshot
    /// (reference/corpus/stdlib.zip; tests/trainer/test_pinned_data.py keeps them equal).
    bytes32 public constant DEFAULT_DATA_ROOT =
        0x5223edd270cdb3dbe1a6009da16252629c4ba70156402a125fbee38086b478ab;
    /// @notice Upper bound on a released checkpoint URI, in bytes.
    uint256 public constant MAX_URI_LENGTH = 512;

    Config private _config;
    /// @dev The ownership split (IOwnershipSplit), in one slot; all to compute until governed.
    uint16 private _computeBps = 10_000;
    uint16 private _codeBps;
    uint16 private _capitalBps;
    /// @inheritdoc ITrainingConfig
    uint64 public version;

    /// @param owner_ The Timelock (or, in tests, whoever governs).
    constructor(address owner_) Ownable(owner_) {
        // The inner and outer settings are trainer/runconfig.py's defaults, chosen by bench.diloco
        // on its validation half (tests/trainer/test_governed_defaults.py keeps them equal).
        _config.innerSteps = 50;
        _config.innerLrE6 = 3000;
        _config.traceInterval = 5; // H / 10: eleven boundaries a round (docs/protocol.md)
        _config.outerLrE6 = 900_000;
        _config.outerMomentumE6 = 900_000;
        _config.wireFormat = 2;
        _config.maxNodes = 64;
        _config.minStake = 1 ether;
        _config.rewardPerRound = 100e18;
        _config.dataMixtureBps.push(10_000);
        _config.dataRoot = DEFAULT_DATA_ROOT;
        version = 1;
        emit ConfigUpdated(1, "initial");
    }

    /// @inheritdoc ITrainingConfig
    function current() external view returns (Config memory) {
        return _config;
    }

    /// @inheritdoc ITrainingConfig
    function minStake() external view returns (uint256) {
        return _config.minStake;
    }

    /// @inheritdoc ITrainingConfig
    function rewardPerRound() external view returns (uint256) {
        return _config.rewardPerRound;
    }

    /// @inheritdoc ITrainingConfig
    function setInnerLoop(uint32 innerSteps, uint32 innerLrE6) external onlyOwner {
        if (innerSteps == 0 || innerSteps > MAX_INNER_STEPS) revert InvalidInnerSteps(innerSteps);
        if (innerLrE6 == 0 || innerLrE6 > MAX_INNER_LR_E6) {
            revert InvalidLearningRate("innerLrE6", innerLrE6);
        }
        _config.innerSteps = innerSteps;
        _config.innerLrE6 = innerLrE6;
        _bump("innerLoop");
    }

    /// @inheritdoc ITrainingConfig
    function setTraceInterval(uint32 traceInterval) external onlyOwner {
        if (traceInterval == 0 || traceInterval > MAX_TRACE_INTERVAL) {
            revert InvalidTraceInterval(traceInterval);
        }
        _config.traceInterval = traceInterval;
        _bump("traceInterval");
    }

    /// @inheritdoc ITrainingConfig
    function setOuterOptimizer(uint32 outerLrE6, uint32 outerMomentumE6) external onlyOwner {
        if (outerLrE6 == 0 || outerLrE6 > MAX_OUTER_LR_E6) {
            revert InvalidLearningRate("outerLrE6", outerLrE6);
        }
        if (outerMomentumE6 >= MOMENTUM_ONE_E6) revert InvalidMomentum(outerMomentumE6);
        _config.outerLrE6 = outerLrE6;
        _config.outerMomentumE6 = outerMomentumE6;
        _bump("outerOptimizer");
    }

    /// @inheritdoc ITrainingConfig
    function setWireFormat(uint8 wireFormat) external onlyOwner {
        if (wireFormat > MAX_WIRE_FORMAT) revert InvalidWireFormat(wireFormat);
        _config.wireFormat = wireFormat;
        _bump("wireFormat");
    }

    /// @inheritdoc ITrainingConfig
    function setMaxNodes(uint32 maxNodes) external onlyOwner {
        if (maxNodes == 0 || maxNodes > MAX_NODES) revert InvalidMaxNodes(maxNodes);
        _config.maxNodes = maxNodes;
        _bump("maxNodes");
    }

    /// @inheritdoc ITrainingConfig
    function setMinStake(uint256 minStake_) external onlyOwner {
        if (minStake_ == 0) revert InvalidMinStake(minStake_);
        _config.minStake = minStake_;
        _bump("minStake");
    }

    /// @inheritdoc ITrainingConfig
    function setRewardPerRound(uint256 rewardPerRound_) external onlyOwner {
        if (rewardPerRound_ > MAX_REWARD_PER_ROUND) revert InvalidRewardPerRound(rewardPerRound_);
        _config.rewardPerRound = rewardPerRound_;
        _bump("rewardPerRound");
    }

    /// @inheritdoc ITrainingConfig
    function setDataMixture(uint16[] calldata dataMixtureBps) external onlyOwner {
        uint256 sum;
        for (uint256 i; i < dataMixtureBps.length; ++i) {
            sum += dataMixtureBps[i];
        }
        if (dataMixtureBps.length == 0 || dataMixtureBps.length > MAX_DATA_SOURCES || sum != BPS) {
            revert InvalidDataMixture(dataMixtureBps.length, sum);
        }
        _config.dataMixtureBps = dataMixtureBps;
        _bump("dataMixture");
    }

    /// @inheritdoc ITrainingConfig
    function setDataRoot(bytes32 dataRoot) external onlyOwner {
        if (dataRoot == bytes32(0)) revert InvalidDataRoot(dataRoot);
        _config.dataRoot = dataRoot;
        _bump("dataRoot");
    }

    /// @inheritdoc ITrainingConfig
    function releaseCheckpoint(bytes32 checkpoint, string calldata uri) external onlyOwner {
        uint256 len = bytes(uri).length;
        if (checkpoint == bytes32(0) || len == 0 || len > MAX_URI_LENGTH) {
            revert InvalidReleasedCheckpoint(checkpoint, len);
        }
        _config.releasedCheckpoint = checkpoint;
        _config.releasedCheckpointURI = uri;
        _bump("releasedCheckpoint");
    }

    // ---------------------------------------------------------------- ownership split

    /// @inheritdoc IOwnershipSplit
    function ownershipSplit() external view returns (uint16, uint16, uint16) {
        return (_computeBps, _codeBps, _capitalBps);
    }

    /// @inheritdoc IOwnershipSplit
    function poolRewards() external view returns (uint256, uint256, uint256) {
        uint256 reward = _config.rewardPerRound;
        return (reward * _computeBps / BPS, reward * _codeBps / BPS, reward * _capitalBps / BPS);
    }

    /// @inheritdoc IOwnershipSplit
    function setOwnershipSplit(uint16 computeBps, uint16 codeBps, uint16 capitalBps)
        external
        onlyOwner
    {
        if (uint256(computeBps) + codeBps + capitalBps != BPS) {
            revert InvalidOwnershipSplit(computeBps, codeBps, capitalBps);
        }
        _computeBps = computeBps;
        _codeBps = codeBps;
        _capitalBps = capitalBps;
        _bump("ownershipSplit");
    }

    function _bump(bytes32 field) private {
        uint64 next = version + 1;
        version = next;
        emit ConfigUpdated(next, field);
    }
}
