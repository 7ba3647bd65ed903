// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {StakeManager} from "../src/StakeManager.sol";
import {TrainingConfig} from "../src/TrainingConfig.sol";
import {IStakeManager} from "../src/interfaces/IStakeManager.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

/// Drives StakeManager with registrations (with key proofs), rotations, payout and minStake
/// changes, stakes, unstakes, withdrawals, slash proposals, vetoes, executions and time, keeping
/// ghost totals of every wei that came in and went out, and of anything that left a frozen node.
contract StakeHandler is Test {
    StakeManager internal immutable sm;
    TrainingConfig internal immutable config;
    address internal immutable gov;
    address internal immutable guardian;
    address[] public keys; // current key per node id - 1
    mapping(address => address) internal operatorOf;
    uint256 internal nextKey = 0x1000;
    uint256[] internal proposals;

    uint256 public ghostIn;
    uint256 public ghostWithdrawn;
    uint256 public ghostSlashed;
    uint256 public ghostReporterPaid;
    uint256 public ghostFrozenLeft; // wei that left a node while it had a pending slash
    mapping(bytes32 => uint256) public calls;
    address public constant REPORTER = address(0xBEEF);

    constructor(StakeManager sm_, TrainingConfig config_, address gov_, address guardian_) {
        sm = sm_;
        config = config_;
        gov = gov_;
        guardian = guardian_;
        for (uint256 i; i < 3; ++i) {
            register(i);
        }
    }

    function _proof(uint256 key, address op, address pay) internal view returns (bytes memory) {
        bytes32 digest = sm.hashNodeKeyProof(
            IStakeManager.NodeKeyProof({
                operator: op, payout: pay, nonce: sm.nonces(vm.addr(key)), deadline: block.timestamp
            })
        );
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, digest);
        return abi.encodePacked(r, s, v);
    }

    function register(uint256 seed) public {
        if (keys.length >= 8) return;
        uint256 key = nextKey++;
        address n = vm.addr(key);
        address op = vm.addr(0x2000 + seed % 3);
        bytes memory sig = _proof(key, op, op);
        vm.prank(op);
        sm.register(n, op, block.timestamp, sig);
        keys.push(n);
        operatorOf[n] = op;
        ++calls["register"];
    }

    function _pick(uint256 seed) internal view returns (uint256 i, address n, address op) {
        i = seed % keys.length;
        n = keys[i];
        op = operatorOf[n];
    }

    function rotate(uint256 seed) external {
        (uint256 i, address n, address op) = _pick(seed);
        uint256 key = nextKey++;
        address fresh = vm.addr(key);
        (, address pay,,,) = sm.nodes(n);
        bytes memory sig = _proof(key, op, pay);
        vm.prank(op);
        try sm.rotateNodeKey(n, fresh, block.timestamp, sig) {
            keys[i] = fresh;
            operatorOf[fresh] = op;
            ++calls["rotate"];
        } catch {
            ++calls["rotate_refused"]; // frozen
        }
    }

    function setPayout(uint256 seed, address pay) external {
        (, address n, address op) = _pick(seed);
        if (pay == address(0)) pay = op;
        vm.prank(op);
        sm.setPayout(n, pay);
        ++calls["setPayout"];
    }

    function setMinStake(uint96 minStake) external {
        vm.prank(gov);
        config.setMinStake(bound(minStake, 1, 5 ether));
        ++calls["setMinStake"];
    }

    function stake(uint256 seed, uint96 amount) external {
        (, address n,) = _pick(seed);
        amount = uint96(bound(amount, config.minStake(), 50 ether));
        vm.deal(address(this), amount);
        sm.stake{value: amount}(n);
        ghostIn += amount;
        ++calls["stake"];
    }

    function requestUnstake(uint256 seed, uint96 amount) external {
        (, address n, address op) = _pick(seed);
        (,, uint256 staked,,) = sm.nodes(n);
        if (staked == 0) return;
        amount = uint96(bound(amount, 1, staked));
        vm.prank(op);
        try sm.requestUnstake(n, amount) {
            ++calls["requestUnstake"];
        } catch {
            ++calls["requestUnstake_refused"];
        }
    }

    function withdraw(uint256 seed) external {
        (, address n, address op) = _pick(seed);
        (,,, uint256 unbonding,) = sm.nodes(n);
        bool frozen = sm.isFrozen(n);
        vm.prank(op);
        try sm.withdraw(n) {
            ghostWithdrawn += unbonding;
            if (frozen) ghostFrozenLeft += unbonding;
            ++calls["withdraw"];
        } catch {
            ++calls["withdraw_refused"];
        }
    }

    function proposeSlash(uint256 seed, uint96 amount, bool withReporter) external {
        (, address n,) = _pick(seed);
        amount = uint96(bound(amount, 1, 100 ether));
        vm.prank(gov);
        proposals.push(
            sm.proposeSlash(
                n, amount, keccak256(abi.encode(amount)), withReporter ? REPORTER : address(0)
            )
        );
        ++calls["proposeSlash"];
    }

    function executeSlash(uint256 seed) external {
        if (proposals.length == 0) return;
        uint256 id = proposals[seed % proposals.length];
        uint256 before = REPORTER.balance;
        try sm.executeSlash(id) returns (uint256 amount) {
            uint256 share = REPORTER.balance - before;
            ghostSlashed += amount - share;
            ghostReporterPaid += share;
            ++calls["executeSlash"];
        } catch {
            ++calls["executeSlash_refused"];
        }
    }

    function veto(uint256 seed) external {
        if (proposals.length == 0) return;
        vm.prank(guardian);
        try sm.vetoSlash(proposals[seed % proposals.length]) {
            ++calls["veto"];
        } catch {
            ++calls["veto_refused"];
        }
    }

    function warp(uint32 secs) external {
        vm.warp(block.timestamp + bound(secs, 1, 10 days));
        ++calls["warp"];
    }

    function nodeCount() external view returns (uint256) {
        return keys.length;
    }
}

contract StakeManagerInvariantTest is ColocoTest {
    StakeHandler internal handler;

    function setUp() public override {
        super.setUp();
        handler = new StakeHandler(stakeManager, config, address(timelock), guardian);
        targetContract(address(handler));
    }

    function _held() internal view returns (uint256 staked, uint256 unbonding) {
        for (uint256 i; i < handler.nodeCount(); ++i) {
            (,, uint256 s, uint256 u,) = stakeManager.nodes(handler.keys(i));
            staked += s;
            unbonding += u;
        }
    }

    function afterInvariant() external view {
        assertGt(handler.calls("stake"), 0, "nothing staked in this run");
    }

    /// staked + unbonding + slashed + reporter shares + withdrawn == everything that came in.
    function invariant_conservationOfStake() public view {
        (uint256 staked, uint256 unbonding) = _held();
        assertEq(
            staked + unbonding + handler.ghostSlashed() + handler.ghostReporterPaid()
                + handler.ghostWithdrawn(),
            handler.ghostIn()
        );
    }

    /// The contract holds exactly the stake it still owes.
    function invariant_balanceMatchesBooks() public view {
        (uint256 staked, uint256 unbonding) = _held();
        assertEq(address(stakeManager).balance, staked + unbonding);
    }

    /// Frozen stake never leaves before its slash settles.
    function invariant_frozenStakeNeverLeaves() public view {
        assertEq(handler.ghostFrozenLeft(), 0);
    }

    /// Slashed funds are all at the treasury or the reporter, none at the slasher.
    function invariant_slashedFundsAtTreasury() public view {
        assertEq(treasury.balance, handler.ghostSlashed());
        assertEq(handler.REPORTER().balance, handler.ghostReporterPaid());
        assertEq(address(timelock).balance, 0);
    }
}
