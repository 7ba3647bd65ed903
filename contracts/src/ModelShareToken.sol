// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";
import {ERC20Votes} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Votes.sol";
import {Nonces} from "@openzeppelin/contracts/utils/Nonces.sol";
import {IModelShareToken} from "./interfaces/IModelShareToken.sol";

/// @title ModelShareToken
/// @notice coloco's ownership token ("coloco Model Share", CMS): ERC20 + Permit + Votes with a
/// block-number clock. Minted only for verified work (MINTER_ROLE: the RewardDistributor) and for
/// grants by governance (GRANTER_ROLE: the Timelock) within a lifetime cap.
/// @dev An account that has never delegated is self-delegated when it first receives tokens, so
/// its voting power is live without a separate `delegate` transaction.
contract ModelShareToken is IModelShareToken, ERC20, ERC20Permit, ERC20Votes, AccessControl {
    /// @notice The role allowed to mint rewards.
    bytes32 public constant MINTER_ROLE = keccak256("MINTER_ROLE");
    /// @notice The role allowed to mint grants within `GRANT_CAP`.
    bytes32 public constant GRANTER_ROLE = keccak256("GRANTER_ROLE");

    /// @notice Lifetime total of `grant` mints.
    uint256 public immutable GRANT_CAP;
    /// @notice Grants minted so far.
    uint256 public granted;

    /// @param admin Holder of DEFAULT_ADMIN_ROLE (wires MINTER/GRANTER, then renounces or hands over).
    /// @param grantCap Lifetime cap on governance grants, in token units.
    constructor(address admin, uint256 grantCap)
        ERC20("coloco Model Share", "CMS")
        ERC20Permit("coloco Model Share")
    {
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        GRANT_CAP = grantCap;
    }

    /// @inheritdoc IModelShareToken
    function mint(address to, uint256 amount) external onlyRole(MINTER_ROLE) {
        _mint(to, amount);
    }

    /// @inheritdoc IModelShareToken
    function grant(address to, uint256 amount) external onlyRole(GRANTER_ROLE) {
        uint256 total = granted + amount;
        if (total > GRANT_CAP) revert GrantCapExceeded(total, GRANT_CAP);
        granted = total;
        emit Granted(to, amount, total);
        _mint(to, amount);
    }

    /// @dev The one hook: after moving balances and votes, self-delegate a recipient that has no
    /// delegate yet (its just-received units then count as its own votes).
    function _update(address from, address to, uint256 value) internal override(ERC20, ERC20Votes) {
        super._update(from, to, value);
        if (to != address(0) && value != 0 && delegates(to) == address(0)) _delegate(to, to);
    }

    /// @inheritdoc ERC20Permit
    function nonces(address owner) public view override(ERC20Permit, Nonces) returns (uint256) {
        return super.nonces(owner);
    }
}
