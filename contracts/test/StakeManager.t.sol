// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {StakeManager} from "../src/StakeManager.sol";
import {ITrainingConfig} from "../src/interfaces/ITrainingConfig.sol";
import {IStakeManager} from "../src/interfaces/IStakeManager.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

/// An operator contract that tries to re-enter `withdraw` when it receives its stake back.
contract ReentrantOperator {
    StakeManager internal immutable sm;
    address internal node;
    bool internal attacked;

    constructor(StakeManager sm_) {
        sm = sm_;
    }

    function setUp(address node_) external payable {
        node = node_;
        sm.register(node_, address(this));
        sm.stake{value: msg.value}(node_);
        sm.requestUnstake(node_, msg.value);
    }

    function withdraw() external {
        sm.withdraw(node);
    }

    receive() external payable {
        if (!attacked) {
            attacked = true;
            sm.withdraw(node);
        }
    }
}

contract StakeManagerTest is ColocoTest {
    event NodeRegistered(address indexed node, address indexed operator, address payout);
    event Staked(address indexed node, address indexed from, uint256 amount, uint256 staked);
    event UnstakeRequested(address indexed node, uint256 amount, uint256 unbonding, uint64 readyAt);
    event Withdrawn(address indexed node, address indexed to, uint256 amount);
    event NodeKeyRotated(address indexed oldNode, address indexed newNode);
    event PayoutChanged(address indexed node, address payout);
    event Slashed(
        address indexed node, uint256 amount, bytes32 indexed evidenceHash, address treasury
    );

    function _node(address n)
        internal
        view
        returns (address op, address pay, uint256 staked, uint256 unbonding, uint64 readyAt)
    {
        return stakeManager.nodes(n);
    }

    // ---------------------------------------------------------------- register

    function test_register_recordsOperatorAndPayout() public {
        vm.expectEmit(address(stakeManager));
        emit NodeRegistered(node, operator, payout);
        vm.prank(operator);
        stakeManager.register(node, payout);
        (address op, address pay, uint256 staked,,) = _node(node);
        assertEq(op, operator);
        assertEq(pay, payout);
        assertEq(staked, 0);
        assertEq(stakeManager.payoutOf(node), payout);
        assertFalse(stakeManager.isActive(node));
    }

    function test_register_revertsOnZeroAddress() public {
        vm.startPrank(operator);
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        stakeManager.register(address(0), payout);
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        stakeManager.register(node, address(0));
        vm.stopPrank();
    }

    function test_register_revertsWhenAlreadyRegistered() public {
        vm.prank(operator);
        stakeManager.register(node, payout);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeAlreadyRegistered.selector, node));
        vm.prank(stranger);
        stakeManager.register(node, stranger);
    }

    // ---------------------------------------------------------------- stake

    function test_stake_makesNodeActive() public {
        vm.prank(operator);
        stakeManager.register(node, payout);
        vm.expectEmit(address(stakeManager));
        emit Staked(node, operator, 1 ether, 1 ether);
        vm.prank(operator);
        stakeManager.stake{value: 1 ether}(node);
        assertTrue(stakeManager.isActive(node));
        assertEq(address(stakeManager).balance, 1 ether);
    }

    function test_stake_anyoneMayTopUp() public {
        _registerAndStake(node, 1 ether);
        vm.prank(stranger);
        stakeManager.stake{value: 0.5 ether}(node);
        (,, uint256 staked,,) = _node(node);
        assertEq(staked, 1.5 ether);
    }

    function test_stake_revertsBelowMinimum() public {
        vm.startPrank(operator);
        stakeManager.register(node, payout);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.StakeBelowMinimum.selector, node, 0.5 ether, 1 ether
            )
        );
        stakeManager.stake{value: 0.5 ether}(node);
        vm.stopPrank();
    }

    function test_stake_revertsOnZeroValue() public {
        _registerAndStake(node, 1 ether);
        vm.expectRevert(IStakeManager.ZeroAmount.selector);
        stakeManager.stake(node);
    }

    function test_stake_revertsForUnknownNode() public {
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeNotRegistered.selector, node));
        vm.prank(operator);
        stakeManager.stake{value: 1 ether}(node);
    }

    function test_isActive_followsMinStakeChanges() public {
        _registerAndStake(node, 1 ether);
        vm.prank(address(timelock));
        config.setMinStake(2 ether);
        assertFalse(stakeManager.isActive(node));
    }

    // ---------------------------------------------------------------- unstake / withdraw

    function test_requestUnstake_startsUnbonding() public {
        _registerAndStake(node, 3 ether);
        uint64 readyAt = uint64(block.timestamp) + UNBONDING;
        vm.expectEmit(address(stakeManager));
        emit UnstakeRequested(node, 2 ether, 2 ether, readyAt);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 2 ether);
        (,, uint256 staked, uint256 unbonding, uint64 ready) = _node(node);
        assertEq(staked, 1 ether);
        assertEq(unbonding, 2 ether);
        assertEq(ready, readyAt);
    }

    function test_requestUnstake_revertsWhenNotOperator() public {
        _registerAndStake(node, 1 ether);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotOperator.selector, node, stranger));
        vm.prank(stranger);
        stakeManager.requestUnstake(node, 1 ether);
    }

    function test_requestUnstake_revertsOnZeroOrTooMuch() public {
        _registerAndStake(node, 1 ether);
        vm.startPrank(operator);
        vm.expectRevert(IStakeManager.ZeroAmount.selector);
        stakeManager.requestUnstake(node, 0);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.InsufficientStake.selector, node, 2 ether, 1 ether)
        );
        stakeManager.requestUnstake(node, 2 ether);
        vm.stopPrank();
    }

    function test_requestUnstake_revertsForUnknownNode() public {
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeNotRegistered.selector, node));
        stakeManager.requestUnstake(node, 1);
    }

    function test_withdraw_paysOperatorAfterDelay() public {
        _registerAndStake(node, 2 ether);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 2 ether);
        vm.warp(block.timestamp + UNBONDING);
        uint256 before = operator.balance;
        vm.expectEmit(address(stakeManager));
        emit Withdrawn(node, operator, 2 ether);
        vm.prank(operator);
        stakeManager.withdraw(node);
        assertEq(operator.balance, before + 2 ether);
        (,,, uint256 unbonding, uint64 ready) = _node(node);
        assertEq(unbonding, 0);
        assertEq(ready, 0);
    }

    function test_withdraw_revertsWhileUnbonding() public {
        _registerAndStake(node, 2 ether);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 1 ether);
        uint64 readyAt = uint64(block.timestamp) + UNBONDING;
        vm.warp(readyAt - 1);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.StillUnbonding.selector, node, readyAt)
        );
        vm.prank(operator);
        stakeManager.withdraw(node);
    }

    function test_withdraw_revertsWithNothingUnbonding() public {
        _registerAndStake(node, 1 ether);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NothingToWithdraw.selector, node));
        vm.prank(operator);
        stakeManager.withdraw(node);
    }

    function test_withdraw_revertsWhenNotOperator() public {
        _registerAndStake(node, 1 ether);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotOperator.selector, node, stranger));
        vm.prank(stranger);
        stakeManager.withdraw(node);
    }

    function test_withdraw_blocksReentrancy() public {
        ReentrantOperator attacker = new ReentrantOperator(stakeManager);
        attacker.setUp{value: 1 ether}(node);
        vm.warp(block.timestamp + UNBONDING);
        // The re-entrant call reverts inside receive(), which makes the transfer fail.
        vm.expectRevert();
        attacker.withdraw();
        (,,, uint256 unbonding,) = _node(node);
        assertEq(unbonding, 1 ether);
        assertEq(address(stakeManager).balance, 1 ether);
    }

    // ---------------------------------------------------------------- rotate / payout

    function test_rotateNodeKey_movesRecordAndRetiresOldKey() public {
        _registerAndStake(node, 1 ether);
        address fresh = makeAddr("fresh");
        vm.expectEmit(address(stakeManager));
        emit NodeKeyRotated(node, fresh);
        vm.prank(operator);
        stakeManager.rotateNodeKey(node, fresh);
        (address op,, uint256 staked,,) = _node(fresh);
        assertEq(op, operator);
        assertEq(staked, 1 ether);
        assertTrue(stakeManager.isActive(fresh));
        assertFalse(stakeManager.isActive(node));
        assertTrue(stakeManager.retired(node));
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeAlreadyRegistered.selector, node));
        vm.prank(stranger);
        stakeManager.register(node, stranger);
    }

    function test_rotateNodeKey_revertsOnTakenOrZeroKey() public {
        _registerAndStake(node, 1 ether);
        address other = makeAddr("other");
        _registerAndStake(other, 1 ether);
        vm.startPrank(operator);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeAlreadyRegistered.selector, other));
        stakeManager.rotateNodeKey(node, other);
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        stakeManager.rotateNodeKey(node, address(0));
        vm.stopPrank();
    }

    function test_rotateNodeKey_revertsWhenNotOperator() public {
        _registerAndStake(node, 1 ether);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotOperator.selector, node, stranger));
        vm.prank(stranger);
        stakeManager.rotateNodeKey(node, stranger);
    }

    function test_setPayout_changesPayout() public {
        _registerAndStake(node, 1 ether);
        vm.expectEmit(address(stakeManager));
        emit PayoutChanged(node, stranger);
        vm.prank(operator);
        stakeManager.setPayout(node, stranger);
        assertEq(stakeManager.payoutOf(node), stranger);
    }

    function test_setPayout_revertsOnZeroOrStranger() public {
        _registerAndStake(node, 1 ether);
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        vm.prank(operator);
        stakeManager.setPayout(node, address(0));
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotOperator.selector, node, stranger));
        vm.prank(stranger);
        stakeManager.setPayout(node, stranger);
    }

    // ---------------------------------------------------------------- slash

    function test_slash_sendsToTreasuryStakedFirst() public {
        _registerAndStake(node, 3 ether);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 2 ether);
        vm.expectEmit(address(stakeManager));
        emit Slashed(node, 1.5 ether, keccak256("evidence"), treasury);
        vm.prank(address(timelock));
        stakeManager.slash(node, 1.5 ether, keccak256("evidence"));
        (,, uint256 staked, uint256 unbonding,) = _node(node);
        assertEq(staked, 0);
        assertEq(unbonding, 1.5 ether);
        assertEq(treasury.balance, 1.5 ether);
        assertEq(address(timelock).balance, 0);
    }

    function test_slash_reachesUnbondingStake() public {
        _registerAndStake(node, 2 ether);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 2 ether);
        vm.prank(address(timelock));
        stakeManager.slash(node, 2 ether, bytes32(0));
        vm.warp(block.timestamp + UNBONDING);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NothingToWithdraw.selector, node));
        vm.prank(operator);
        stakeManager.withdraw(node);
    }

    function test_slash_revertsWhenNotSlasher() public {
        _registerAndStake(node, 1 ether);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector,
                stranger,
                stakeManager.SLASHER_ROLE()
            )
        );
        vm.prank(stranger);
        stakeManager.slash(node, 1 ether, bytes32(0));
    }

    function test_slash_revertsOnZeroTooMuchOrUnknown() public {
        _registerAndStake(node, 1 ether);
        vm.startPrank(address(timelock));
        vm.expectRevert(IStakeManager.ZeroAmount.selector);
        stakeManager.slash(node, 0, bytes32(0));
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.InsufficientStake.selector, node, 2 ether, 1 ether)
        );
        stakeManager.slash(node, 2 ether, bytes32(0));
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeNotRegistered.selector, stranger));
        stakeManager.slash(stranger, 1, bytes32(0));
        vm.stopPrank();
    }

    function test_constructor_revertsOnZeroTreasury() public {
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        new StakeManager(address(this), ITrainingConfig(address(config)), address(0), 1);
    }

    // ---------------------------------------------------------------- fuzz

    function testFuzz_stake_accumulates(uint96 first, uint96 second) public {
        first = uint96(bound(first, 1 ether, 100 ether));
        second = uint96(bound(second, 1, 100 ether));
        _registerAndStake(node, first);
        vm.prank(stranger);
        stakeManager.stake{value: second}(node);
        (,, uint256 staked,,) = _node(node);
        assertEq(staked, uint256(first) + second);
        assertEq(address(stakeManager).balance, uint256(first) + second);
    }

    function testFuzz_unbonding_withdrawsExactlyWhatWasRequested(
        uint96 amount,
        uint96 unstake,
        uint32 wait
    ) public {
        amount = uint96(bound(amount, 1 ether, 500 ether));
        unstake = uint96(bound(unstake, 1, amount));
        _registerAndStake(node, amount);
        vm.prank(operator);
        stakeManager.requestUnstake(node, unstake);
        vm.warp(block.timestamp + wait);
        uint256 before = operator.balance;
        vm.prank(operator);
        if (wait < UNBONDING) {
            vm.expectPartialRevert(IStakeManager.StillUnbonding.selector);
            stakeManager.withdraw(node);
            return;
        }
        stakeManager.withdraw(node);
        assertEq(operator.balance - before, unstake);
        (,, uint256 staked,,) = _node(node);
        assertEq(staked, uint256(amount) - unstake);
    }

    function testFuzz_slash_neverTakesMoreThanHeld(uint96 amount, uint96 unstake, uint96 cut)
        public
    {
        amount = uint96(bound(amount, 1 ether, 500 ether));
        unstake = uint96(bound(unstake, 0, amount));
        cut = uint96(bound(cut, 1, uint256(amount) * 2));
        _registerAndStake(node, amount);
        if (unstake > 0) {
            vm.prank(operator);
            stakeManager.requestUnstake(node, unstake);
        }
        vm.prank(address(timelock));
        if (cut > amount) {
            vm.expectRevert(
                abi.encodeWithSelector(IStakeManager.InsufficientStake.selector, node, cut, amount)
            );
            stakeManager.slash(node, cut, bytes32(0));
            return;
        }
        stakeManager.slash(node, cut, bytes32(0));
        (,, uint256 staked, uint256 unbonding,) = _node(node);
        assertEq(staked + unbonding, uint256(amount) - cut);
        assertEq(treasury.balance, cut);
        assertEq(address(stakeManager).balance, uint256(amount) - cut);
        // staked is taken first
        assertEq(staked, cut >= amount - unstake ? 0 : amount - unstake - cut);
    }
}

/// Gas of staking a registered node for the first time (cold storage, execution only).
contract StakeManagerGasTest is ColocoTest {
    function setUp() public override {
        super.setUp();
        vm.prank(operator);
        stakeManager.register(node, payout);
    }

    function test_gas_stake_newNode() public {
        vm.prank(operator);
        stakeManager.stake{value: 1 ether}(node);
        uint256 gasUsed = vm.snapshotGasLastCall("StakeManager", "stake_newNode");
        assertLe(gasUsed, 150_000);
    }

    function test_gas_register_newNode() public {
        vm.prank(operator);
        stakeManager.register(makeAddr("node2"), payout);
        uint256 gasUsed = vm.snapshotGasLastCall("StakeManager", "register_newNode");
        assertLe(gasUsed, 150_000);
    }
}
