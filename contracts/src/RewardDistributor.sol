// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {IContributionLedger} from "./interfaces/IContributionLedger.sol";
import {IModelShareToken} from "./interfaces/IModelShareToken.sol";
import {IRewardDistributor} from "./interfaces/IRewardDistributor.sol";

/// @title RewardDistributor
/// @notice Pays cumulative rewards: a leaf says "account is owed cumulativeAmount in total", so one
/// claim against the latest root pays everything owed so far minus what was already claimed.
/// @dev Holds no tokens: it mints through the token's MINTER_ROLE.
contract RewardDistributor is IRewardDistributor {
    /// @notice The token minted to claimants.
    IModelShareToken public immutable token;
    /// @notice Where the latest rewards root is read.
    IContributionLedger public immutable ledger;

    /// @inheritdoc IRewardDistributor
    mapping(address account => uint256) public claimed;

    constructor(IModelShareToken token_, IContributionLedger ledger_) {
        token = token_;
        ledger = ledger_;
    }

    /// @inheritdoc IRewardDistributor
    function claim(address account, uint256 cumulativeAmount, bytes32[] calldata proof)
        external
        returns (uint256 amount)
    {
        bytes32 root = ledger.latestRewardsRoot();
        if (root == bytes32(0)) revert NoRewardsRoot();
        // OpenZeppelin StandardMerkleTree leaf: double hash of the ABI encoding.
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(account, cumulativeAmount))));
        if (!MerkleProof.verifyCalldata(proof, root, leaf)) {
            revert InvalidProof(account, cumulativeAmount);
        }
        uint256 already = claimed[account];
        if (cumulativeAmount <= already) revert NothingToClaim(account, cumulativeAmount, already);
        // cumulativeAmount > already: no underflow.
        unchecked {
            amount = cumulativeAmount - already;
        }
        claimed[account] = cumulativeAmount;
        emit Claimed(account, amount, cumulativeAmount);
        token.mint(account, amount);
    }
}
