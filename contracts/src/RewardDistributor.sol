// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {IContributionLedger} from "./interfaces/IContributionLedger.sol";
import {IRewardDistributor} from "./interfaces/IRewardDistributor.sol";
import {ModelShareToken} from "./ModelShareToken.sol";

/// @title RewardDistributor
/// @notice Pays cumulative rewards: a leaf says "account is owed cumulativeAmount in total", so one
/// claim against any finalized root pays everything owed by it minus what was already claimed,
/// never beyond the root's committed budget.
/// @dev Holds no tokens. It creates the ModelShareToken with itself as the token's only, fixed
/// minter (no role, no admin can add another).
contract RewardDistributor is IRewardDistributor, AccessControl, Pausable {
    /// @inheritdoc IRewardDistributor
    bytes32 public constant GUARDIAN_ROLE = keccak256("GUARDIAN_ROLE");

    /// @dev One slot per account.
    struct Account {
        uint224 claimed;
        uint32 rootIndex;
    }

    /// @notice The token minted to claimants (created by this contract).
    ModelShareToken public immutable token;
    /// @notice Where roots' finality and budgets are read.
    IContributionLedger public immutable ledger;

    // Declared first so it shares a slot with Pausable's `_paused`: one SLOAD per claim.
    uint128 private _totalClaimed;
    mapping(address account => Account) private _accounts;

    /// @param ledger_ The ContributionLedger whose roots and budgets bound claims.
    /// @param admin Holder of DEFAULT_ADMIN_ROLE (grants GUARDIAN_ROLE; the Timelock).
    /// @param tokenAdmin The token's DEFAULT_ADMIN_ROLE (wires GRANTER, then renounces).
    /// @param grantLimit The token's grant limit per period (token units).
    /// @param grantPeriod The token's grant period (seconds).
    constructor(
        IContributionLedger ledger_,
        address admin,
        address tokenAdmin,
        uint256 grantLimit,
        uint48 grantPeriod
    ) {
        ledger = ledger_;
        token = new ModelShareToken(tokenAdmin, address(this), grantLimit, grantPeriod);
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
    }

    /// @inheritdoc IRewardDistributor
    function claim(address account, uint256 cumulativeAmount, bytes32[] calldata proof)
        external
        whenNotPaused
        returns (uint256 amount)
    {
        // OpenZeppelin StandardMerkleTree leaf: double hash of the ABI encoding. The proof's root
        // must be a committed one, so a wrong account, amount or proof finds no root.
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(account, cumulativeAmount))));
        bytes32 root = MerkleProof.processProofCalldata(proof, leaf);
        IContributionLedger.RootInfo memory info = ledger.rootInfo(root);
        if (info.index == 0) revert InvalidProof(account, cumulativeAmount);
        if (info.revoked) revert IContributionLedger.RootIsRevoked(root);
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < info.finalizedAt) {
            revert IContributionLedger.RootPending(root, info.finalizedAt);
        }
        Account memory acct = _accounts[account];
        if (info.index < acct.rootIndex) revert StaleRoot(account, info.index, acct.rootIndex);
        uint256 already = acct.claimed;
        if (cumulativeAmount <= already) revert NothingToClaim(account, cumulativeAmount, already);
        // cumulativeAmount > already: no underflow.
        unchecked {
            amount = cumulativeAmount - already;
        }
        uint256 total = _totalClaimed + amount;
        if (total > info.budget) revert BudgetExceeded(total, info.budget);
        // total <= budget, a uint128
        // forge-lint: disable-next-line(unsafe-typecast)
        _totalClaimed = uint128(total);
        _accounts[account] =
            Account({claimed: SafeCast.toUint224(cumulativeAmount), rootIndex: info.index});
        emit Claimed(account, amount, cumulativeAmount);
        token.mint(account, amount);
    }

    /// @inheritdoc IRewardDistributor
    function pause() external {
        if (!hasRole(GUARDIAN_ROLE, msg.sender) && !hasRole(DEFAULT_ADMIN_ROLE, msg.sender)) {
            revert NotGuardian(msg.sender);
        }
        _pause();
    }

    /// @inheritdoc IRewardDistributor
    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    /// @inheritdoc IRewardDistributor
    function claimed(address account) external view returns (uint256) {
        return _accounts[account].claimed;
    }

    /// @inheritdoc IRewardDistributor
    function lastRootIndex(address account) external view returns (uint32) {
        return _accounts[account].rootIndex;
    }

    /// @inheritdoc IRewardDistributor
    function totalClaimed() external view returns (uint256) {
        return _totalClaimed;
    }
}
