// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {StakeManager} from "../src/StakeManager.sol";
import {ITrainingConfig} from "../src/interfaces/ITrainingConfig.sol";
import {IGovernanceLatency, IStakeManager} from "../src/interfaces/IStakeManager.sol";
import {ComputeAttestation, IContributionLedger} from "../src/interfaces/IContributionLedger.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

/// An operator contract that tries to re-enter `withdraw` when it receives its stake back.
contract ReentrantOperator {
    StakeManager internal immutable sm;
    address internal node;
    bool internal attacked;

    constructor(StakeManager sm_) {
        sm = sm_;
    }

    function setUp(address node_, uint256 deadline, bytes calldata sig) external payable {
        node = node_;
        sm.register(node_, address(this), deadline, sig);
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

/// A reporter contract that, paid its share, re-enters StakeManager with another call (a second
/// equivocation report, a second slash execution).
contract ReentrantReporter {
    address internal immutable sm;
    bytes internal again;

    constructor(address sm_) {
        sm = sm_;
    }

    function report(bytes calldata first, bytes calldata second) external {
        again = second;
        _call(first);
    }

    receive() external payable {
        bytes memory second = again;
        if (second.length != 0) {
            delete again;
            _call(second);
        }
    }

    function _call(bytes memory data) internal {
        (bool ok, bytes memory ret) = sm.call(data);
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(ret, 32), mload(ret))
            }
        }
    }
}

contract StakeManagerTest is ColocoTest {
    event NodeRegistered(
        address indexed node, address indexed operator, address payout, uint64 nodeId
    );
    event NodeKeyRotated(address indexed oldNode, address indexed newNode, uint64 nodeId);
    event Slashed(
        uint64 indexed nodeId,
        uint256 amount,
        bytes32 indexed evidenceHash,
        address reporter,
        uint256 reporterShare,
        address treasury
    );

    uint256 internal constant MIN = 1 ether;

    function _staked(address n) internal view returns (uint256 staked, uint256 unbonding) {
        (,, staked, unbonding,) = stakeManager.nodes(n);
    }

    function _propose(address n, uint256 amount, address reporter) internal returns (uint256) {
        vm.prank(address(timelock));
        return stakeManager.proposeSlash(n, amount, keccak256("evidence"), reporter);
    }

    // ---------------------------------------------------------------- register / rotate

    function test_register_withKeyProof() public {
        uint256 deadline = block.timestamp + 1 hours;
        bytes memory sig = _keyProof(nodeKey, operator, payout, deadline);
        vm.expectEmit(address(stakeManager));
        emit NodeRegistered(node, operator, payout, 1);
        vm.prank(operator);
        stakeManager.register(node, payout, deadline, sig);
        (address op, address pay,,,) = stakeManager.nodes(node);
        assertEq(op, operator);
        assertEq(pay, payout);
        assertEq(stakeManager.nodeIdOf(node), 1);
        assertEq(stakeManager.nonces(node), 1);
    }

    /// Attack: anybody could register somebody else's key (front-run or blacklist it).
    function test_attack_registerSomebodyElsesKeyFails() public {
        uint256 deadline = block.timestamp + 1 hours;
        // the attacker has no signature by the key for itself: the operator's proof is bound
        // to the operator and to the payout
        bytes memory sig = _keyProof(nodeKey, operator, payout, deadline);
        address recovered = _recoverFor(stranger, payout, deadline, sig);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.WrongKeySigner.selector, recovered, node)
        );
        vm.prank(stranger);
        stakeManager.register(node, payout, deadline, sig);
        bytes memory sig2 = _keyProof(nodeKey, operator, stranger, deadline);
        address recovered2 = _recoverFor(operator, payout, deadline, sig2);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.WrongKeySigner.selector, recovered2, node)
        );
        vm.prank(operator);
        stakeManager.register(node, payout, deadline, sig2);
        assertEq(stakeManager.nodeIdOf(node), 0);
    }

    function _recoverFor(address op, address pay, uint256 deadline, bytes memory sig)
        internal
        view
        returns (address)
    {
        bytes32 digest = stakeManager.hashNodeKeyProof(
            IStakeManager.NodeKeyProof({
                operator: op, payout: pay, nonce: stakeManager.nonces(node), deadline: deadline
            })
        );
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := mload(add(sig, 32))
            s := mload(add(sig, 64))
            v := byte(0, mload(add(sig, 96)))
        }
        return ecrecover(digest, v, r, s);
    }

    function test_register_revertsOnExpiredMalformedZeroOrTaken() public {
        uint256 deadline = block.timestamp - 1;
        bytes memory sig = _keyProof(nodeKey, operator, payout, deadline);
        vm.startPrank(operator);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.ProofExpired.selector, deadline));
        stakeManager.register(node, payout, deadline, sig);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.InvalidKeyProof.selector, hex"01"));
        stakeManager.register(node, payout, block.timestamp, hex"01");
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        stakeManager.register(address(0), payout, block.timestamp, sig);
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        stakeManager.register(node, address(0), block.timestamp, sig);
        vm.stopPrank();
        _register(nodeKey);
        sig = _keyProof(nodeKey, operator, payout, block.timestamp);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeAlreadyRegistered.selector, node));
        vm.prank(operator);
        stakeManager.register(node, payout, block.timestamp, sig);
    }

    function test_rotate_keepsIdAndNeedsNewKeyProof() public {
        _registerAndStake(nodeKey, 2 ether);
        (address fresh, uint256 freshKey) = makeAddrAndKey("fresh");
        uint256 deadline = block.timestamp + 1;
        bytes memory sig = _keyProof(freshKey, operator, payout, deadline);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotOperator.selector, node, stranger));
        vm.prank(stranger);
        stakeManager.rotateNodeKey(node, fresh, deadline, sig);
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        vm.prank(operator);
        stakeManager.rotateNodeKey(node, address(0), deadline, sig);
        vm.expectEmit(address(stakeManager));
        emit NodeKeyRotated(node, fresh, 1);
        vm.prank(operator);
        stakeManager.rotateNodeKey(node, fresh, deadline, sig);
        assertEq(stakeManager.nodeIdOf(fresh), 1);
        assertEq(stakeManager.nodeIdOf(node), 1);
        assertTrue(stakeManager.retired(node));
        assertFalse(stakeManager.isActive(node));
        assertTrue(stakeManager.isActive(fresh));
        (uint256 staked,) = _staked(fresh);
        assertEq(staked, 2 ether);
        // the retired key can never come back
        bytes memory back = _keyProof(nodeKey, operator, payout, deadline);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeAlreadyRegistered.selector, node));
        vm.prank(operator);
        stakeManager.register(node, payout, deadline, back);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeNotRegistered.selector, node));
        vm.prank(operator);
        stakeManager.requestUnstake(node, 1);
    }

    function test_rotate_revertsOnTakenKey() public {
        _register(nodeKey);
        (address other, uint256 otherKey) = makeAddrAndKey("other");
        _register(otherKey);
        bytes memory sig = _keyProof(otherKey, operator, payout, block.timestamp);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeAlreadyRegistered.selector, other));
        vm.prank(operator);
        stakeManager.rotateNodeKey(node, other, block.timestamp, sig);
    }

    function test_setPayout_onlyOperatorNonZero() public {
        _register(nodeKey);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotOperator.selector, node, stranger));
        vm.prank(stranger);
        stakeManager.setPayout(node, stranger);
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        vm.prank(operator);
        stakeManager.setPayout(node, address(0));
        vm.prank(operator);
        stakeManager.setPayout(node, stranger);
        assertEq(stakeManager.payoutOf(node), stranger);
    }

    // ---------------------------------------------------------------- stake / unstake

    function test_stake_andMinimum() public {
        _register(nodeKey);
        vm.expectRevert(IStakeManager.ZeroAmount.selector);
        vm.prank(operator);
        stakeManager.stake(node);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.StakeBelowMinimum.selector, node, MIN - 1, MIN)
        );
        vm.prank(operator);
        stakeManager.stake{value: MIN - 1}(node);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeNotRegistered.selector, stranger));
        vm.prank(operator);
        stakeManager.stake{value: MIN}(stranger);
        vm.prank(stranger); // anyone may top up
        stakeManager.stake{value: MIN}(node);
        assertTrue(stakeManager.isActive(node));
        vm.prank(address(timelock));
        config.setMinStake(2 ether);
        assertFalse(stakeManager.isActive(node));
    }

    function test_unstakeAndWithdraw_afterEffectiveDelay() public {
        _registerAndStake(nodeKey, 3 ether);
        vm.startPrank(operator);
        vm.expectRevert(IStakeManager.ZeroAmount.selector);
        stakeManager.requestUnstake(node, 0);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.InsufficientStake.selector, node, 4 ether, 3 ether)
        );
        stakeManager.requestUnstake(node, 4 ether);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NothingToWithdraw.selector, node));
        stakeManager.withdraw(node);
        stakeManager.requestUnstake(node, 1 ether);
        uint64 readyAt = uint64(block.timestamp + stakeManager.effectiveUnbondingDelay());
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.StillUnbonding.selector, node, readyAt)
        );
        stakeManager.withdraw(node);
        vm.warp(readyAt);
        uint256 before = operator.balance;
        stakeManager.withdraw(node);
        vm.stopPrank();
        assertEq(operator.balance, before + 1 ether);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotOperator.selector, node, stranger));
        vm.prank(stranger);
        stakeManager.requestUnstake(node, 1);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotOperator.selector, node, stranger));
        vm.prank(stranger);
        stakeManager.withdraw(node);
    }

    function test_withdraw_revertsOnReentry() public {
        ReentrantOperator attacker = new ReentrantOperator(stakeManager);
        uint256 deadline = block.timestamp + 1;
        bytes memory sig = _keyProof(nodeKey, address(attacker), address(attacker), deadline);
        attacker.setUp{value: 2 ether}(node, deadline, sig);
        vm.warp(block.timestamp + stakeManager.effectiveUnbondingDelay());
        vm.expectRevert(ReentrancyGuard.ReentrancyGuardReentrantCall.selector);
        attacker.withdraw();
    }

    function test_pause_guardianStopsWithdrawOnly() public {
        _registerAndStake(nodeKey, 2 ether);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 1 ether);
        vm.warp(block.timestamp + stakeManager.effectiveUnbondingDelay());
        vm.prank(guardian);
        stakeManager.pause();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        vm.prank(operator);
        stakeManager.withdraw(node);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotGuardian.selector, stranger));
        vm.prank(stranger);
        stakeManager.pause();
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, guardian, bytes32(0)
            )
        );
        vm.prank(guardian);
        stakeManager.unpause();
        vm.prank(address(timelock));
        stakeManager.unpause();
        vm.prank(operator);
        stakeManager.withdraw(node);
    }

    // ---------------------------------------------------------------- optimistic slashing

    /// Attack: a node escaped a queued slash by rotating its key. Now the slash is keyed to the
    /// node id, and proposing it freezes rotation, unstake and withdraw.
    function test_attack_rotationDuringSlashDoesNotEscape() public {
        _registerAndStake(nodeKey, 2 ether);
        uint256 id = _propose(node, 1 ether, address(0));
        (address fresh, uint256 freshKey) = makeAddrAndKey("fresh");
        bytes memory sig = _keyProof(freshKey, operator, payout, block.timestamp);
        vm.startPrank(operator);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeFrozen.selector, node));
        stakeManager.rotateNodeKey(node, fresh, block.timestamp, sig);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeFrozen.selector, node));
        stakeManager.requestUnstake(node, 1 ether);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeFrozen.selector, node));
        stakeManager.withdraw(node);
        vm.stopPrank();
        assertTrue(stakeManager.isFrozen(node));
        vm.warp(block.timestamp + SLASH_DISPUTE);
        uint256 before = treasury.balance;
        assertEq(stakeManager.executeSlash(id), 1 ether);
        assertEq(treasury.balance, before + 1 ether);
        assertFalse(stakeManager.isFrozen(node));
    }

    /// A slash proposed against a key rotated away earlier still lands on the node.
    function test_slash_byRetiredKeyHitsTheNode() public {
        _registerAndStake(nodeKey, 2 ether);
        (address fresh, uint256 freshKey) = makeAddrAndKey("fresh");
        bytes memory sig = _keyProof(freshKey, operator, payout, block.timestamp);
        vm.prank(operator);
        stakeManager.rotateNodeKey(node, fresh, block.timestamp, sig);
        uint256 id = _propose(node, 1 ether, address(0));
        vm.warp(block.timestamp + SLASH_DISPUTE);
        stakeManager.executeSlash(id);
        (uint256 staked,) = _staked(fresh);
        assertEq(staked, 1 ether);
    }

    /// Attack: an exact-amount slash reverted after a partial withdraw. Now min(amount, available).
    function test_attack_partialWithdrawDoesNotDodgeSlash() public {
        _registerAndStake(nodeKey, 2 ether);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 1 ether);
        vm.warp(block.timestamp + stakeManager.effectiveUnbondingDelay());
        vm.prank(operator);
        stakeManager.withdraw(node);
        uint256 id = _propose(node, 5 ether, address(0));
        vm.warp(block.timestamp + SLASH_DISPUTE);
        assertEq(stakeManager.executeSlash(id), 1 ether);
        (uint256 staked, uint256 unbonding) = _staked(node);
        assertEq(staked + unbonding, 0);
    }

    /// Attack: unbonding was shorter than a governance slash, so stake left first. Now a slash
    /// proposed right after requestUnstake still takes the unbonding stake.
    function test_attack_unbondingOutlastsGovernanceSlash() public {
        _registerAndStake(nodeKey, 2 ether);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 2 ether);
        assertGe(
            stakeManager.effectiveUnbondingDelay(), governor.governanceLatency() + SLASH_DISPUTE
        );
        // the whole governance latency passes before the slash is even proposed
        vm.warp(block.timestamp + governor.governanceLatency());
        uint256 id = _propose(node, 2 ether, address(0));
        vm.warp(block.timestamp + SLASH_DISPUTE);
        assertEq(stakeManager.executeSlash(id), 2 ether);
    }

    function test_slash_reporterShareAndTreasury() public {
        _registerAndStake(nodeKey, 2 ether);
        address reporter = makeAddr("reporter");
        uint256 id = _propose(node, 1 ether, reporter);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.SlashNotReady.selector, id, block.timestamp + SLASH_DISPUTE
            )
        );
        stakeManager.executeSlash(id);
        vm.warp(block.timestamp + SLASH_DISPUTE);
        uint256 share = 1 ether * uint256(stakeManager.params().reporterShareBps) / 10_000;
        vm.expectEmit(address(stakeManager));
        emit Slashed(1, 1 ether, keccak256("evidence"), reporter, share, treasury);
        stakeManager.executeSlash(id);
        assertEq(reporter.balance, share);
        assertEq(treasury.balance, 1 ether - share);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotPendingSlash.selector, id));
        stakeManager.executeSlash(id);
    }

    function test_vetoSlash_byGuardianOrGovernance() public {
        _registerAndStake(nodeKey, 2 ether);
        uint256 id = _propose(node, 1 ether, address(0));
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotGuardian.selector, stranger));
        vm.prank(stranger);
        stakeManager.vetoSlash(id);
        vm.prank(guardian);
        stakeManager.vetoSlash(id);
        assertFalse(stakeManager.isFrozen(node));
        vm.warp(block.timestamp + SLASH_DISPUTE);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotPendingSlash.selector, id));
        stakeManager.executeSlash(id);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NotPendingSlash.selector, id));
        vm.prank(address(timelock));
        stakeManager.vetoSlash(id);
        (uint256 staked,) = _staked(node);
        assertEq(staked, 2 ether);
    }

    function test_proposeSlash_revertPaths() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector,
                stranger,
                stakeManager.SLASHER_ROLE()
            )
        );
        vm.prank(stranger);
        stakeManager.proposeSlash(node, 1, bytes32(0), address(0));
        vm.startPrank(address(timelock));
        vm.expectRevert(IStakeManager.ZeroAmount.selector);
        stakeManager.proposeSlash(node, 0, bytes32(0), address(0));
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeNotRegistered.selector, node));
        stakeManager.proposeSlash(node, 1, bytes32(0), address(0));
        vm.stopPrank();
    }

    // ---------------------------------------------------------------- equivocation

    function _att(bytes32 result) internal view returns (ComputeAttestation memory) {
        return ComputeAttestation({
            runId: DEFAULT_RUN,
            round: 3,
            node: node,
            configVersion: 1,
            baseCheckpoint: keccak256("base"),
            pseudoGradient: keccak256("pg"),
            dataShard: keccak256("shard"),
            innerSteps: 50,
            tokens: 1000,
            resultCheckpoint: result,
            traceRoot: keccak256("trace")
        });
    }

    function _sign(uint256 key, ComputeAttestation memory a) internal view returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, ledger.hashAttestation(a));
        return abi.encodePacked(r, s, v);
    }

    function test_reportEquivocation_slashesAtOnceAndPaysReporter() public {
        _registerAndStake(nodeKey, 10 ether);
        ComputeAttestation memory a = _att(keccak256("x"));
        ComputeAttestation memory b = _att(keccak256("y"));
        bytes memory sa = _sign(nodeKey, a);
        bytes memory sb = _sign(nodeKey, b);
        uint256 before = stranger.balance;
        vm.prank(stranger);
        uint256 amount = stakeManager.reportEquivocation(a, sa, b, sb);
        assertEq(amount, 1 ether); // 10 % of 10 ether
        assertEq(stranger.balance, before + 0.1 ether);
        assertEq(treasury.balance, 0.9 ether);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.EquivocationAlreadySlashed.selector, uint64(1), DEFAULT_RUN, uint64(3)
            )
        );
        stakeManager.reportEquivocation(a, sa, b, sb);
    }

    function test_reportEquivocation_revertsOnReentry() public {
        _registerAndStake(nodeKey, 10 ether);
        ComputeAttestation memory a = _att(keccak256("x"));
        ComputeAttestation memory b = _att(keccak256("y"));
        ComputeAttestation memory c = _att(keccak256("x"));
        ComputeAttestation memory d = _att(keccak256("y"));
        c.round = 4;
        d.round = 4;
        bytes memory first = abi.encodeCall(
            StakeManager.reportEquivocation, (a, _sign(nodeKey, a), b, _sign(nodeKey, b))
        );
        bytes memory second = abi.encodeCall(
            StakeManager.reportEquivocation, (c, _sign(nodeKey, c), d, _sign(nodeKey, d))
        );
        ReentrantReporter reporter = new ReentrantReporter(address(stakeManager));
        vm.expectRevert(ReentrancyGuard.ReentrancyGuardReentrantCall.selector);
        reporter.report(first, second);
    }

    function test_executeSlash_revertsOnReentry() public {
        _registerAndStake(nodeKey, 10 ether);
        ReentrantReporter reporter = new ReentrantReporter(address(stakeManager));
        uint256 first = _propose(node, 1 ether, address(reporter));
        uint256 second = _propose(node, 1 ether, address(reporter));
        vm.warp(block.timestamp + SLASH_DISPUTE);
        vm.expectRevert(ReentrancyGuard.ReentrancyGuardReentrantCall.selector);
        reporter.report(
            abi.encodeCall(StakeManager.executeSlash, (first)),
            abi.encodeCall(StakeManager.executeSlash, (second))
        );
    }

    function test_reportEquivocation_revertPaths() public {
        _registerAndStake(nodeKey, 10 ether);
        ComputeAttestation memory a = _att(keccak256("x"));
        ComputeAttestation memory b = _att(keccak256("y"));
        bytes memory sa = _sign(nodeKey, a);
        bytes memory sb = _sign(nodeKey, b);
        vm.expectRevert(IStakeManager.NotEquivocation.selector);
        stakeManager.reportEquivocation(a, sa, a, sa); // same content
        ComputeAttestation memory c = _att(keccak256("y"));
        c.round = 4;
        bytes memory sc = _sign(nodeKey, c);
        vm.expectRevert(IStakeManager.NotEquivocation.selector);
        stakeManager.reportEquivocation(a, sa, c, sc); // other round
        c = _att(keccak256("y"));
        c.runId = keccak256("other run");
        sc = _sign(nodeKey, c);
        vm.expectRevert(IStakeManager.NotEquivocation.selector);
        stakeManager.reportEquivocation(a, sa, c, sc);
        (, uint256 otherKey) = makeAddrAndKey("other");
        bytes memory forged = _sign(otherKey, b);
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.WrongSigner.selector, vm.addr(otherKey), node
            )
        );
        stakeManager.reportEquivocation(a, sa, b, forged);
        ComputeAttestation memory d = _att(keccak256("y"));
        d.node = stranger;
        ComputeAttestation memory e = _att(keccak256("z"));
        e.node = stranger;
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.NodeNotRegistered.selector, stranger));
        stakeManager.reportEquivocation(d, sb, e, sb);
        (uint256 staked,) = _staked(node);
        assertEq(staked, 10 ether);
        assertEq(sb.length, 65);
    }

    // ---------------------------------------------------------------- golden vectors

    /// tests/vectors/node_key_proof.json (eth-account): the StakeManager's code placed at each
    /// vector's verifyingContract on its chain id reproduces the digest; the signature recovers
    /// the node key.
    function test_goldenVectors_nodeKeyProof() public {
        string memory json = vm.readFile("tests/vectors/node_key_proof.json");
        bytes memory code = address(stakeManager).code;
        uint256 n;
        for (uint256 i;; ++i) {
            string memory base = string.concat(".[", vm.toString(i), "]");
            if (!vm.keyExistsJson(json, base)) break;
            _checkVector(json, base, code);
            ++n;
        }
        assertGe(n, 4);
    }

    function _vectorProof(string memory json, string memory base)
        internal
        pure
        returns (IStakeManager.NodeKeyProof memory)
    {
        string memory m = string.concat(base, ".typed_data.message.");
        return IStakeManager.NodeKeyProof({
            operator: vm.parseJsonAddress(json, string.concat(m, "operator")),
            payout: vm.parseJsonAddress(json, string.concat(m, "payout")),
            nonce: vm.parseJsonUint(json, string.concat(m, "nonce")),
            deadline: vm.parseJsonUint(json, string.concat(m, "deadline"))
        });
    }

    function _checkVector(string memory json, string memory base, bytes memory code) internal {
        string memory d = string.concat(base, ".typed_data.domain.");
        address at = vm.parseJsonAddress(json, string.concat(d, "verifyingContract"));
        vm.etch(at, code);
        vm.chainId(vm.parseJsonUint(json, string.concat(d, "chainId")));
        bytes32 digest = StakeManager(payable(at)).hashNodeKeyProof(_vectorProof(json, base));
        assertEq(digest, vm.parseJsonBytes32(json, string.concat(base, ".digest")));
        bytes memory sig = vm.parseJsonBytes(json, string.concat(base, ".signature"));
        (address signer,,) = ECDSA.tryRecover(digest, sig);
        assertEq(signer, vm.parseJsonAddress(json, string.concat(base, ".signer")));
    }

    // ---------------------------------------------------------------- governance and bounds

    /// Attack: slashed stake went to the slasher (the Timelock was the default treasury).
    function test_attack_treasuryCanNeverBeSlasherOrExecutor() public {
        StakeManager.Init memory init = _init();
        init.treasury = address(timelock);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.InvalidTreasury.selector, address(timelock))
        );
        new StakeManager(init);
        init.treasury = address(governor);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.InvalidTreasury.selector, address(governor))
        );
        new StakeManager(init);
        init.treasury = guardian;
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.InvalidTreasury.selector, guardian));
        new StakeManager(init);
        bytes32 slasher = stakeManager.SLASHER_ROLE();
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.InvalidTreasury.selector, treasury));
        vm.prank(address(timelock));
        stakeManager.grantRole(slasher, treasury);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.InvalidTreasury.selector, treasury));
        vm.prank(address(timelock));
        stakeManager.grantRole(bytes32(0), treasury);
    }

    /// F15: governance could grant the treasury GUARDIAN_ROLE (docs said it never can): the
    /// treasury would then veto the slashes that pay it or pause withdrawals.
    function test_attack_treasuryCannotBeGrantedGuardian() public {
        bytes32 role = stakeManager.GUARDIAN_ROLE();
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.InvalidTreasury.selector, treasury));
        vm.prank(address(timelock));
        stakeManager.grantRole(role, treasury);
        assertFalse(stakeManager.hasRole(role, treasury));
    }

    function _init() internal view returns (StakeManager.Init memory) {
        return StakeManager.Init({
            admin: address(timelock),
            guardian: guardian,
            config: ITrainingConfig(address(config)),
            ledger: IContributionLedger(address(ledger)),
            governance: IGovernanceLatency(address(governor)),
            treasury: treasury,
            unbondingDelay: UNBONDING,
            slashDisputeWindow: SLASH_DISPUTE,
            reporterShareBps: 1000,
            equivocationSlashBps: 1000
        });
    }

    function test_constructor_bounds() public {
        StakeManager.Init memory init = _init();
        init.treasury = address(0);
        vm.expectRevert(IStakeManager.ZeroAddress.selector);
        new StakeManager(init);
        init = _init();
        init.unbondingDelay = 1;
        uint256 needed = governor.governanceLatency() + SLASH_DISPUTE;
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.UnbondingTooShort.selector, 1, needed));
        new StakeManager(init);
        init = _init();
        init.slashDisputeWindow = 0;
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.InvalidParameter.selector, bytes32("slashDisputeWindow"), 0
            )
        );
        new StakeManager(init);
        init = _init();
        init.reporterShareBps = 5001;
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.InvalidParameter.selector, bytes32("reporterShareBps"), 5001
            )
        );
        new StakeManager(init);
        init = _init();
        init.equivocationSlashBps = 0;
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.InvalidParameter.selector, bytes32("equivocationSlashBps"), 0
            )
        );
        new StakeManager(init);
    }

    /// Every governed setter is governance's alone: the guardian (no admin) is refused, with
    /// values the admin could set.
    function test_setSlashDisputeWindow_bounds() public {
        vm.startPrank(address(timelock));
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.InvalidParameter.selector, bytes32("slashDisputeWindow"), 0
            )
        );
        stakeManager.setSlashDisputeWindow(0);
        uint64 tooLong = stakeManager.MAX_SLASH_DISPUTE_WINDOW() + 1;
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.InvalidParameter.selector, bytes32("slashDisputeWindow"), tooLong
            )
        );
        stakeManager.setSlashDisputeWindow(tooLong);
        vm.stopPrank();
    }

    /// A slash larger than the staked part takes the rest from unbonding stake: what is left to
    /// withdraw is exactly what the slash did not take (the contract stays solvent).
    function test_slash_takesFromUnbondingThenWithdrawPaysTheRest() public {
        _registerAndStake(nodeKey, 2 ether);
        vm.prank(operator);
        stakeManager.requestUnstake(node, 1.5 ether);
        uint256 id = _propose(node, 1 ether, address(0));
        vm.warp(block.timestamp + SLASH_DISPUTE);
        assertEq(stakeManager.executeSlash(id), 1 ether);
        (uint256 staked, uint256 unbonding) = _staked(node);
        assertEq(staked, 0);
        assertEq(unbonding, 1 ether);
        vm.warp(block.timestamp + stakeManager.effectiveUnbondingDelay());
        uint256 before = operator.balance;
        vm.prank(operator);
        stakeManager.withdraw(node);
        assertEq(operator.balance, before + 1 ether);
        assertEq(address(stakeManager).balance, 0);
        (,,,, uint64 readyAt) = stakeManager.nodes(node);
        assertEq(readyAt, 0); // nothing unbonding: no ready time left behind
    }

    function test_setters_onlyGovernance() public {
        bytes memory refused = abi.encodeWithSelector(
            IAccessControl.AccessControlUnauthorizedAccount.selector, guardian, bytes32(0)
        );
        vm.startPrank(guardian);
        vm.expectRevert(refused);
        stakeManager.setUnbondingDelay(UNBONDING);
        vm.expectRevert(refused);
        stakeManager.setSlashDisputeWindow(SLASH_DISPUTE);
        vm.expectRevert(refused);
        stakeManager.setReporterShareBps(0);
        vm.expectRevert(refused);
        stakeManager.setEquivocationSlashBps(10_000);
        vm.stopPrank();
    }

    function test_setters_enforceUnbondingCoversLatencyPlusWindow() public {
        uint256 latency = governor.governanceLatency();
        vm.startPrank(address(timelock));
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.UnbondingTooShort.selector, 1, latency + SLASH_DISPUTE
            )
        );
        stakeManager.setUnbondingDelay(1);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.UnbondingTooShort.selector, UNBONDING, latency + UNBONDING
            )
        );
        stakeManager.setSlashDisputeWindow(UNBONDING);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.InvalidParameter.selector, bytes32("unbondingDelay"), 366 days
            )
        );
        stakeManager.setUnbondingDelay(366 days);
        stakeManager.setUnbondingDelay(30 days);
        stakeManager.setSlashDisputeWindow(3 days);
        stakeManager.setReporterShareBps(0);
        stakeManager.setEquivocationSlashBps(10_000);
        vm.stopPrank();
        assertEq(stakeManager.params().unbondingDelay, 30 days);
        assertEq(stakeManager.params().slashDisputeWindow, 3 days);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, stranger, bytes32(0)
            )
        );
        vm.prank(stranger);
        stakeManager.setUnbondingDelay(30 days);
    }
}

/// Gas of registration and first stake (execution only; transaction-level figures come from
/// anvil receipts: tests/contracts/test_gas_on_chain.py).
contract StakeManagerGasTest is ColocoTest {
    function test_gas_register_and_stake_newNode() public {
        (address other, uint256 otherKey) = makeAddrAndKey("other");
        _register(otherKey); // the node counter is warm, as after the first registration
        uint256 deadline = block.timestamp + 1 hours;
        bytes memory sig = _keyProof(nodeKey, operator, payout, deadline);
        vm.prank(operator);
        stakeManager.register(node, payout, deadline, sig);
        vm.snapshotGasLastCall("StakeManager", "exec_register_newNode");
        vm.prank(operator);
        stakeManager.stake{value: 1 ether}(node);
        vm.snapshotGasLastCall("StakeManager", "exec_stake_newNode");
        assertTrue(stakeManager.isActive(node) && other != node);
    }
}
