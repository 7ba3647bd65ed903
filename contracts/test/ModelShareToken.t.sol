// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {ModelShareToken} from "../src/ModelShareToken.sol";
import {IModelShareToken} from "../src/interfaces/IModelShareToken.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

contract ModelShareTokenTest is ColocoTest {
    event Granted(address indexed to, uint256 amount, uint256 granted);
    event DelegateChanged(
        address indexed delegator, address indexed fromDelegate, address indexed toDelegate
    );

    bytes32 internal constant PERMIT_TYPEHASH = keccak256(
        "Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)"
    );

    function test_metadata() public view {
        assertEq(token.name(), "coloco Model Share");
        assertEq(token.symbol(), "CMS");
        assertEq(token.decimals(), 18);
        assertEq(token.clock(), block.timestamp);
        assertEq(token.CLOCK_MODE(), "mode=timestamp");
        assertEq(token.GRANT_LIMIT(), GRANT_LIMIT);
        assertEq(token.GRANT_PERIOD(), 30 days);
    }

    function test_mint_onlyDistributor() public {
        vm.prank(address(distributor));
        token.mint(payout, 5e18);
        assertEq(token.balanceOf(payout), 5e18);
        assertEq(token.MINTER(), address(distributor));
        vm.expectRevert(
            abi.encodeWithSelector(IModelShareToken.NotMinter.selector, address(timelock))
        );
        vm.prank(address(timelock));
        token.mint(payout, 1);
    }

    function test_mint_autoDelegatesFirstReceipt() public {
        vm.expectEmit(address(token));
        emit DelegateChanged(payout, address(0), payout);
        vm.prank(address(distributor));
        token.mint(payout, 5e18);
        assertEq(token.delegates(payout), payout);
        vm.warp(block.timestamp + 1);
        assertEq(token.getVotes(payout), 5e18);
        assertEq(token.getPastVotes(payout, block.timestamp - 1), 5e18);
        assertEq(token.getPastTotalSupply(block.timestamp - 1), 5e18);
    }

    function test_transfer_autoDelegatesRecipientButKeepsChosenDelegate() public {
        vm.prank(address(distributor));
        token.mint(payout, 10e18);
        vm.prank(payout);
        token.delegate(stranger);
        address fresh = makeAddr("fresh");
        vm.prank(payout);
        assertTrue(token.transfer(fresh, 4e18));
        assertEq(token.delegates(fresh), fresh);
        assertEq(token.getVotes(fresh), 4e18);
        assertEq(token.delegates(payout), stranger);
        assertEq(token.getVotes(stranger), 6e18);
        assertEq(token.getVotes(payout), 0);
    }

    function test_grant_withinCap() public {
        vm.expectEmit(address(token));
        emit Granted(stranger, 100e18, 100e18);
        vm.prank(address(timelock));
        token.grant(stranger, 100e18);
        assertEq(token.balanceOf(stranger), 100e18);
        assertEq(token.granted(), 100e18);
        assertEq(token.getVotes(stranger), 100e18);
    }

    function test_grant_rateLimitedPerPeriod() public {
        vm.startPrank(address(timelock));
        token.grant(stranger, GRANT_LIMIT - 1);
        vm.expectRevert(abi.encodeWithSelector(IModelShareToken.GrantRateExceeded.selector, 2, 1));
        token.grant(stranger, 2);
        vm.warp(block.timestamp + 30 days);
        assertEq(token.grantAvailable(), GRANT_LIMIT);
        token.grant(stranger, GRANT_LIMIT);
        vm.stopPrank();
        assertEq(token.granted(), 2 * GRANT_LIMIT - 1);
    }

    function test_constructor_refusesZeroGrantLimit() public {
        vm.expectRevert(
            abi.encodeWithSelector(IModelShareToken.InvalidGrantLimit.selector, 0, 1 days)
        );
        new ModelShareToken(address(this), address(this), 0, 1 days);
        vm.expectRevert(abi.encodeWithSelector(IModelShareToken.InvalidGrantLimit.selector, 1, 0));
        new ModelShareToken(address(this), address(this), 1, 0);
    }

    /// Attack (delegate(address(0)) undone by the next receipt): an explicit choice stays.
    function test_attack_undelegateSurvivesNextReceipt() public {
        vm.prank(address(distributor));
        token.mint(payout, 5e18);
        vm.prank(payout);
        token.delegate(address(0));
        assertEq(token.getVotes(payout), 0);
        vm.prank(address(distributor));
        token.mint(payout, 1e18);
        assertEq(token.delegates(payout), address(0));
        assertEq(token.getVotes(payout), 0);
    }

    /// An explicit delegation, to oneself too, is a recorded choice (the public flag clients
    /// read); an auto-delegation on receipt is not.
    function test_delegationChosen_recordsExplicitSelfDelegationOnly() public {
        vm.prank(address(distributor));
        token.mint(payout, 1e18);
        assertEq(token.delegates(payout), payout); // auto-delegated on receipt
        assertFalse(token.delegationChosen(payout));
        vm.prank(payout);
        token.delegate(payout);
        assertTrue(token.delegationChosen(payout));
    }

    function test_grant_revertsWhenNotGranter() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector,
                address(distributor),
                token.GRANTER_ROLE()
            )
        );
        vm.prank(address(distributor));
        token.grant(stranger, 1);
    }

    function test_roles_nobodyCanAddMinters() public {
        bytes32 minter = keccak256("MINTER_ROLE");
        assertFalse(token.hasRole(bytes32(0), address(timelock)));
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector,
                address(timelock),
                bytes32(0)
            )
        );
        vm.prank(address(timelock));
        token.grantRole(minter, address(timelock));
    }

    function test_permit_setsAllowanceAndNonce() public {
        (address owner, uint256 pk) = makeAddrAndKey("holder");
        bytes32 structHash =
            keccak256(abi.encode(PERMIT_TYPEHASH, owner, stranger, 1e18, 0, block.timestamp + 1));
        bytes32 digest =
            keccak256(abi.encodePacked("\x19\x01", token.DOMAIN_SEPARATOR(), structHash));
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(pk, digest);
        token.permit(owner, stranger, 1e18, block.timestamp + 1, v, r, s);
        assertEq(token.allowance(owner, stranger), 1e18);
        assertEq(token.nonces(owner), 1);
    }

    function testFuzz_votesFollowBalancesOfSelfDelegatedHolders(uint128 a, uint128 b, uint128 moved)
        public
    {
        address alice = makeAddr("alice");
        address bob = makeAddr("bob");
        vm.startPrank(address(distributor));
        token.mint(alice, a);
        token.mint(bob, b);
        vm.stopPrank();
        moved = uint128(bound(moved, 0, a));
        vm.prank(alice);
        assertTrue(token.transfer(bob, moved));
        assertEq(token.getVotes(alice), token.balanceOf(alice));
        assertEq(token.getVotes(bob), token.balanceOf(bob));
        assertEq(token.getVotes(alice) + token.getVotes(bob), token.totalSupply());
    }
}
