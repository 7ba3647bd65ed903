// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {StakeManager} from "../src/StakeManager.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

/// Drives StakeManager with random operators, stakes, unstakes, withdrawals, slashes and time,
/// keeping ghost totals of every wei that came in and went out.
contract StakeHandler is Test {
    StakeManager internal immutable sm;
    address internal immutable slasher;
    address[] public nodes;
    mapping(address => address) internal operatorOf;

    uint256 public ghostIn;
    uint256 public ghostWithdrawn;
    uint256 public ghostSlashed;

    constructor(StakeManager sm_, address slasher_) {
        sm = sm_;
        slasher = slasher_;
        for (uint256 i; i < 4; ++i) {
            address n = vm.addr(0x1000 + i);
            address op = vm.addr(0x2000 + i);
            vm.prank(op);
            sm.register(n, op);
            nodes.push(n);
            operatorOf[n] = op;
        }
    }

    function _pick(uint256 seed) internal view returns (address n, address op) {
        n = nodes[seed % nodes.length];
        op = operatorOf[n];
    }

    function stake(uint256 seed, uint96 amount) external {
        (address n,) = _pick(seed);
        amount = uint96(bound(amount, 1 ether, 50 ether));
        vm.deal(address(this), amount);
        sm.stake{value: amount}(n);
        ghostIn += amount;
    }

    function requestUnstake(uint256 seed, uint96 amount) external {
        (address n, address op) = _pick(seed);
        (,, uint256 staked,,) = sm.nodes(n);
        if (staked == 0) return;
        amount = uint96(bound(amount, 1, staked));
        vm.prank(op);
        sm.requestUnstake(n, amount);
    }

    function withdraw(uint256 seed) external {
        (address n, address op) = _pick(seed);
        (,,, uint256 unbonding, uint64 readyAt) = sm.nodes(n);
        // forge-lint: disable-next-line(block-timestamp)
        if (unbonding == 0 || block.timestamp < readyAt) return;
        vm.prank(op);
        sm.withdraw(n);
        ghostWithdrawn += unbonding;
    }

    function slash(uint256 seed, uint96 amount) external {
        (address n,) = _pick(seed);
        (,, uint256 staked, uint256 unbonding,) = sm.nodes(n);
        if (staked + unbonding == 0) return;
        amount = uint96(bound(amount, 1, staked + unbonding));
        vm.prank(slasher);
        sm.slash(n, amount, keccak256(abi.encode(amount)));
        ghostSlashed += amount;
    }

    function warp(uint32 secs) external {
        vm.warp(block.timestamp + bound(secs, 1, 10 days));
    }

    function nodeCount() external view returns (uint256) {
        return nodes.length;
    }
}

contract StakeManagerInvariantTest is ColocoTest {
    StakeHandler internal handler;

    function setUp() public override {
        super.setUp();
        handler = new StakeHandler(stakeManager, address(timelock));
        targetContract(address(handler));
    }

    function _held() internal view returns (uint256 staked, uint256 unbonding) {
        for (uint256 i; i < handler.nodeCount(); ++i) {
            (,, uint256 s, uint256 u,) = stakeManager.nodes(handler.nodes(i));
            staked += s;
            unbonding += u;
        }
    }

    /// staked + unbonding + slashed + withdrawn == everything that came in.
    function invariant_conservationOfStake() public view {
        (uint256 staked, uint256 unbonding) = _held();
        assertEq(
            staked + unbonding + handler.ghostSlashed() + handler.ghostWithdrawn(),
            handler.ghostIn()
        );
    }

    /// The contract holds exactly the stake it still owes.
    function invariant_balanceMatchesBooks() public view {
        (uint256 staked, uint256 unbonding) = _held();
        assertEq(address(stakeManager).balance, staked + unbonding);
    }

    /// Slashed funds are all at the treasury, none at the slasher.
    function invariant_slashedFundsAtTreasury() public view {
        assertEq(treasury.balance, handler.ghostSlashed());
        assertEq(address(timelock).balance, 0);
    }
}
