// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";
import {ERC20Votes} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Votes.sol";
import {Nonces} from "@openzeppelin/contracts/utils/Nonces.sol";
import {RateLimiter} from "@openzeppelin/contracts/utils/RateLimiter.sol";
import {Time} from "@openzeppelin/contracts/utils/types/Time.sol";
import {IModelShareToken} from "./interfaces/IModelShareToken.sol";

/// @title ModelShareToken
/// @notice coloco's ownership token ("coloco Model Share", CMS): ERC20 + Permit + Votes with a
/// timestamp clock (ERC-6372, reliable on L2s). Minted only for verified work (`MINTER`, fixed at
/// construction: the RewardDistributor that creates the token; MINTER_ROLE: the capital and code
/// payers, wired at deployment before the admin renounces) and for grants by governance
/// (GRANTER_ROLE: the Timelock) within a rate limit: at most `GRANT_LIMIT` in any sliding
/// `GRANT_PERIOD`.
/// @dev An account that has never chosen a delegate is self-delegated when it first receives
/// tokens, so its voting power is live without a separate `delegate` transaction. An explicit
/// choice (including `delegate(address(0))`) is never undone by a later receipt.
contract ModelShareToken is IModelShareToken, ERC20, ERC20Permit, ERC20Votes, AccessControl {
    using RateLimiter for RateLimiter.SlidingWindow;

    /// @notice The reward minter (the RewardDistributor that creates the token): fixed, and
    /// checked without a storage read on the hot claim path.
    address public immutable MINTER;
    /// @notice Further minters (RunFunding, CodeRegistry), each bounded by its own budget;
    /// granted by the admin before it renounces, so nobody can add one later.
    bytes32 public constant MINTER_ROLE = keccak256("MINTER_ROLE");
    /// @notice The role allowed to mint grants within the rate limit.
    bytes32 public constant GRANTER_ROLE = keccak256("GRANTER_ROLE");

    /// @notice Most grants may mint in any `GRANT_PERIOD`, in token units.
    uint256 public immutable GRANT_LIMIT;
    /// @notice The sliding period of the grant limit, in seconds.
    uint256 public immutable GRANT_PERIOD;
    /// @notice Grants minted so far.
    uint256 public granted;
    /// @notice Whether the account chose its delegate itself (auto-delegation then stays off).
    mapping(address account => bool) public delegationChosen;

    RateLimiter.SlidingWindow private _grants;

    /// @param admin Holder of DEFAULT_ADMIN_ROLE (wires GRANTER, then renounces).
    /// @param minter The RewardDistributor.
    /// @param grantLimit Most grants may mint per period, in token units.
    /// @param grantPeriod The sliding period, in seconds.
    constructor(address admin, address minter, uint256 grantLimit, uint48 grantPeriod)
        ERC20("coloco Model Share", "CMS")
        ERC20Permit("coloco Model Share")
    {
        if (grantLimit == 0 || grantPeriod == 0 || grantLimit > type(uint208).max) {
            revert InvalidGrantLimit(grantLimit, grantPeriod);
        }
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        MINTER = minter;
        GRANT_LIMIT = grantLimit;
        GRANT_PERIOD = grantPeriod;
        // forge-lint: disable-next-line(unsafe-typecast)
        _grants.updateSettings(grantPeriod, uint208(grantLimit));
    }

    /// @inheritdoc IModelShareToken
    function mint(address to, uint256 amount) external {
        if (msg.sender != MINTER && !hasRole(MINTER_ROLE, msg.sender)) {
            revert NotMinter(msg.sender);
        }
        _mint(to, amount);
    }

    /// @inheritdoc IModelShareToken
    function grant(address to, uint256 amount) external onlyRole(GRANTER_ROLE) {
        if (!_grants.tryConsume(bytes32(0), amount)) {
            revert GrantRateExceeded(amount, _grants.available(bytes32(0)));
        }
        uint256 total = granted + amount;
        granted = total;
        emit Granted(to, amount, total);
        _mint(to, amount);
    }

    /// @inheritdoc IModelShareToken
    function grantAvailable() external view returns (uint256) {
        return _grants.available(bytes32(0));
    }

    /// @notice Delegates votes and turns auto-delegation off for good.
    function delegate(address delegatee) public override {
        delegationChosen[_msgSender()] = true;
        super.delegate(delegatee);
    }

    /// @notice ERC-6372: timestamps, not block numbers.
    function clock() public view override returns (uint48) {
        return Time.timestamp();
    }

    /// @notice ERC-6372 clock description.
    // solhint-disable-next-line func-name-mixedcase
    function CLOCK_MODE() public pure override returns (string memory) {
        return "mode=timestamp";
    }

    /// @dev The one hook: after moving balances and votes, self-delegate a recipient that never
    /// chose a delegate (its just-received units then count as its own votes).
    function _update(address from, address to, uint256 value) internal override(ERC20, ERC20Votes) {
        super._update(from, to, value);
        if (to != address(0) && value != 0 && delegates(to) == address(0) && !delegationChosen[to])
        {
            _delegate(to, to);
        }
    }

    /// @dev A delegation by signature is a choice too.
    function _delegate(address account, address delegatee) internal override {
        if (account != delegatee || delegatee == address(0)) delegationChosen[account] = true;
        super._delegate(account, delegatee);
    }

    /// @inheritdoc ERC20Permit
    function nonces(address owner) public view override(ERC20Permit, Nonces) returns (uint256) {
        return super.nonces(owner);
    }
}
