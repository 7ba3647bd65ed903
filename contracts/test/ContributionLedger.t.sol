// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {ContributionLedger} from "../src/ContributionLedger.sol";
import {ITrainingConfig} from "../src/interfaces/ITrainingConfig.sol";
import {ComputeAttestation, IContributionLedger} from "../src/interfaces/IContributionLedger.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

contract ContributionLedgerTest is ColocoTest {
    event RoundCommitted(
        bytes32 indexed runId,
        uint64 indexed round,
        bytes32 rewardsRoot,
        bytes32 checkpointHash,
        uint256 totalWork,
        bytes32 attestationsRoot,
        uint256 rewardTotal
    );
    event RootRevoked(bytes32 indexed root, address indexed by);

    uint256 internal constant REWARD = 100e18;

    function _commitAt(bytes32 run, uint64 round, bytes32 root, uint256 reward) internal {
        vm.prank(committer);
        ledger.commitRound(
            run, round, root, keccak256(abi.encode(run, round)), 7, keccak256("a"), reward
        );
    }

    function _att(address signer) internal pure returns (ComputeAttestation memory a) {
        a = ComputeAttestation({
            runId: DEFAULT_RUN,
            round: 3,
            node: signer,
            configVersion: 2,
            baseCheckpoint: keccak256("base"),
            pseudoGradient: keccak256("pg"),
            dataShard: keccak256("shard"),
            innerSteps: 50,
            tokens: 1_024_000,
            resultCheckpoint: keccak256("result"),
            traceRoot: keccak256("trace")
        });
    }

    // ---------------------------------------------------------------- commitRound

    function test_commitRound_genesisThenIncreasingRounds() public {
        assertFalse(ledger.hasCommitted(DEFAULT_RUN));
        vm.expectEmit(address(ledger));
        emit RoundCommitted(
            DEFAULT_RUN, 0, bytes32(0), keccak256(abi.encode(DEFAULT_RUN, 0)), 7, keccak256("a"), 0
        );
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 0);
        assertTrue(ledger.hasCommitted(DEFAULT_RUN));
        assertEq(ledger.lastRound(DEFAULT_RUN), 0);
        assertEq(ledger.checkpointOf(DEFAULT_RUN, 0), keccak256(abi.encode(DEFAULT_RUN, uint64(0))));
        assertEq(ledger.rootCount(), 0);
        _commitAt(DEFAULT_RUN, 1, keccak256("root1"), REWARD);
        _commitAt(DEFAULT_RUN, 5, keccak256("root5"), REWARD);
        assertEq(ledger.lastRound(DEFAULT_RUN), 5);
        assertEq(ledger.rootCount(), 2);
        assertEq(ledger.totalBudget(), 2 * REWARD);
        assertEq(ledger.rootInfo(keccak256("root5")).index, 2);
        assertEq(ledger.rootInfo(keccak256("root5")).finalizedAt, block.timestamp + DISPUTE);
        assertEq(ledger.checkpointOf(DEFAULT_RUN, 1), keccak256(abi.encode(DEFAULT_RUN, uint64(1))));
        assertEq(ledger.checkpointOf(DEFAULT_RUN, 2), bytes32(0));
    }

    /// A repeated root (a round that added no reward) keeps its finality and its budget; new
    /// budget under it is refused (F3: it would pay at once).
    function test_commitRound_repeatedRootKeepsItsFinalityAndBudget() public {
        _commitAt(DEFAULT_RUN, 0, keccak256("r"), REWARD);
        vm.warp(block.timestamp + 10);
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.RepeatedRootWithBudget.selector, keccak256("r"), 1
            )
        );
        _commitAt(DEFAULT_RUN, 1, keccak256("r"), 1);
        _commitAt(DEFAULT_RUN, 1, keccak256("r"), 0);
        IContributionLedger.RootInfo memory info = ledger.rootInfo(keccak256("r"));
        assertEq(info.index, 1);
        assertEq(info.finalizedAt, block.timestamp - 10 + DISPUTE);
        assertEq(info.budget, REWARD);
        assertEq(ledger.totalBudget(), REWARD);
        assertEq(ledger.runBudget(DEFAULT_RUN), REWARD);
    }

    function test_commitRound_runsAreIndependent() public {
        _commitAt(DEFAULT_RUN, 0, keccak256("r"), 0);
        _commitAt(DEFAULT_RUN, 9, keccak256("r"), 0);
        _commitAt(keccak256("run-2"), 0, bytes32(0), 0);
        assertEq(ledger.lastRound(keccak256("run-2")), 0);
        assertEq(ledger.lastRound(DEFAULT_RUN), 9);
    }

    function test_commitRound_revertsWhenNotCommitter() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector,
                address(this),
                ledger.COMMITTER_ROLE()
            )
        );
        ledger.commitRound(DEFAULT_RUN, 0, bytes32(0), keccak256("c"), 0, bytes32(0), 0);
    }

    function test_commitRound_revertsOnRepeatedRound() public {
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.RoundNotIncreasing.selector, DEFAULT_RUN, 0, 0
            )
        );
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 0);
    }

    function test_commitRound_revertsOnLowerRound() public {
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 0);
        _commitAt(DEFAULT_RUN, 4, keccak256("r"), 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.RoundNotIncreasing.selector, DEFAULT_RUN, 3, 4
            )
        );
        _commitAt(DEFAULT_RUN, 3, keccak256("r"), 0);
    }

    /// Attack: a first commit at type(uint64).max bricked the run. Now genesis must be round 0.
    function test_attack_firstCommitAtMaxRoundIsRefused() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.GenesisNotZero.selector, DEFAULT_RUN, type(uint64).max
            )
        );
        _commitAt(DEFAULT_RUN, type(uint64).max, keccak256("r"), 0);
    }

    function test_commitRound_revertsOnSkipBeyondMaximum() public {
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 0);
        uint32 maxSkip = ledger.maxRoundSkip();
        _commitAt(DEFAULT_RUN, maxSkip, bytes32(0), 0);
        uint64 next = uint64(maxSkip) * 2 + 1;
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.RoundSkipTooLarge.selector, DEFAULT_RUN, next, maxSkip, maxSkip
            )
        );
        _commitAt(DEFAULT_RUN, next, bytes32(0), 0);
    }

    function test_commitRound_revertsOnZeroCheckpoint() public {
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.ZeroCheckpoint.selector, DEFAULT_RUN, 0)
        );
        vm.prank(committer);
        ledger.commitRound(DEFAULT_RUN, 0, keccak256("r"), bytes32(0), 0, bytes32(0), 0);
    }

    /// Attack: a leaked committer key mints without limit. Now each commit's budget is capped.
    function test_attack_committerCannotCommitBeyondRewardPerRound() public {
        uint256 perRound = config.rewardPerRound();
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.RewardAboveBudget.selector, perRound + 1, perRound
            )
        );
        _commitAt(DEFAULT_RUN, 0, keccak256("r"), perRound + 1);
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RewardAboveBudget.selector, 1e30, perRound)
        );
        _commitAt(DEFAULT_RUN, 0, keccak256("r"), 1e30);
    }

    /// With an ownership split, a commit carries at most the compute pool's share.
    function test_commitRound_capIsTheComputePool() public {
        vm.prank(address(timelock));
        config.setOwnershipSplit(8000, 1000, 1000);
        uint256 pool = config.rewardPerRound() * 8000 / 10_000;
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RewardAboveBudget.selector, pool + 1, pool)
        );
        _commitAt(DEFAULT_RUN, 0, keccak256("r"), pool + 1);
        _commitAt(DEFAULT_RUN, 0, keccak256("r"), pool);
        assertEq(ledger.totalBudget(), pool);
    }

    function test_commitRound_revertsOnRewardWithoutRoot() public {
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.RewardWithoutRoot.selector, 1));
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 1);
    }

    function test_commitRound_revertsOnRevokedRoot() public {
        _commitAt(DEFAULT_RUN, 0, keccak256("bad"), REWARD);
        vm.prank(guardian);
        ledger.revokeRoot(keccak256("bad"));
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RootIsRevoked.selector, keccak256("bad"))
        );
        _commitAt(DEFAULT_RUN, 1, keccak256("bad"), 0);
    }

    function testFuzz_commitRound_acceptsOnlyIncreasingBoundedRounds(uint64 b) public {
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 0);
        _commitAt(DEFAULT_RUN, 5, keccak256("r"), 0);
        uint32 maxSkip = ledger.maxRoundSkip();
        bool ok = b > 5 && b - 5 <= maxSkip;
        if (b <= 5) {
            vm.expectRevert(
                abi.encodeWithSelector(
                    IContributionLedger.RoundNotIncreasing.selector, DEFAULT_RUN, b, 5
                )
            );
        } else if (!ok) {
            vm.expectRevert(
                abi.encodeWithSelector(
                    IContributionLedger.RoundSkipTooLarge.selector, DEFAULT_RUN, b, 5, maxSkip
                )
            );
        }
        _commitAt(DEFAULT_RUN, b, keccak256("r"), 0);
        assertEq(ledger.lastRound(DEFAULT_RUN), ok ? b : 5);
    }

    // ---------------------------------------------------------------- dispute window

    function test_claimable_onlyAfterWindow() public {
        _commitAt(DEFAULT_RUN, 0, keccak256("r"), REWARD);
        uint64 at = uint64(block.timestamp) + DISPUTE;
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RootPending.selector, keccak256("r"), at)
        );
        ledger.claimable(keccak256("r"));
        vm.warp(at);
        (uint32 index, uint256 budget) = ledger.claimable(keccak256("r"));
        assertEq(index, 1);
        assertEq(budget, REWARD);
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.UnknownRoot.selector, keccak256("x"))
        );
        ledger.claimable(keccak256("x"));
    }

    function test_revokeRoot_byGuardianOrGovernanceDuringWindowOnly() public {
        _commitAt(DEFAULT_RUN, 0, keccak256("a"), REWARD);
        _commitAt(DEFAULT_RUN, 1, keccak256("b"), REWARD);
        vm.expectEmit(address(ledger));
        emit RootRevoked(keccak256("a"), guardian);
        vm.prank(guardian);
        ledger.revokeRoot(keccak256("a"));
        assertEq(ledger.totalBudget(), 2 * REWARD); // the replacement root will carry that work
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RootIsRevoked.selector, keccak256("a"))
        );
        ledger.claimable(keccak256("a"));
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RootIsRevoked.selector, keccak256("a"))
        );
        vm.prank(address(timelock));
        ledger.revokeRoot(keccak256("a"));
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.NotGuardian.selector, stranger));
        vm.prank(stranger);
        ledger.revokeRoot(keccak256("b"));
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.UnknownRoot.selector, keccak256("c"))
        );
        vm.prank(guardian);
        ledger.revokeRoot(keccak256("c"));
        vm.warp(block.timestamp + DISPUTE);
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.RootFinalized.selector, keccak256("b"), block.timestamp
            )
        );
        vm.prank(address(timelock));
        ledger.revokeRoot(keccak256("b"));
    }

    function test_revokeRoot_governanceRevokesPending() public {
        _commitAt(DEFAULT_RUN, 0, keccak256("a"), REWARD);
        vm.prank(address(timelock));
        ledger.revokeRoot(keccak256("a"));
        assertTrue(ledger.rootInfo(keccak256("a")).revoked);
    }

    // ---------------------------------------------------------------- pause and settings

    function test_pause_guardianStopsCommitsOnlyGovernanceResumes() public {
        vm.prank(guardian);
        ledger.pause();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, guardian, bytes32(0)
            )
        );
        vm.prank(guardian);
        ledger.unpause();
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.NotGuardian.selector, stranger));
        vm.prank(stranger);
        ledger.pause();
        vm.prank(address(timelock));
        ledger.unpause();
        _commitAt(DEFAULT_RUN, 0, bytes32(0), 0);
    }

    /// The deploy gives its one guardian to every contract with one, RunFunding included (it
    /// once read COLOCO_GUARDIAN alone, so a deploy with the guardian as a parameter left
    /// RunFunding's pending ETH roots without a guardian).
    function test_deploy_oneGuardianEverywhere() public view {
        assertTrue(ledger.hasRole(ledger.GUARDIAN_ROLE(), guardian));
        assertTrue(distributor.hasRole(distributor.GUARDIAN_ROLE(), guardian));
        assertTrue(stakeManager.hasRole(stakeManager.GUARDIAN_ROLE(), guardian));
        assertTrue(funding.hasRole(funding.GUARDIAN_ROLE(), guardian));
    }

    function test_guardian_removableByGovernance() public {
        bytes32 role = ledger.GUARDIAN_ROLE();
        vm.prank(address(timelock));
        ledger.revokeRole(role, guardian);
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.NotGuardian.selector, guardian));
        vm.prank(guardian);
        ledger.pause();
    }

    function test_setters_boundsAndAccess() public {
        vm.startPrank(address(timelock));
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.InvalidDisputeWindow.selector, 0)
        );
        ledger.setDisputeWindow(0);
        uint64 tooLong = ledger.MAX_DISPUTE_WINDOW() + 1;
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.InvalidDisputeWindow.selector, tooLong)
        );
        ledger.setDisputeWindow(tooLong);
        ledger.setDisputeWindow(2 days);
        assertEq(ledger.disputeWindow(), 2 days);
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.InvalidMaxRoundSkip.selector, 0));
        ledger.setMaxRoundSkip(0);
        uint32 tooMany = ledger.MAX_ROUND_SKIP_LIMIT() + 1;
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.InvalidMaxRoundSkip.selector, tooMany)
        );
        ledger.setMaxRoundSkip(tooMany);
        ledger.setMaxRoundSkip(7);
        assertEq(ledger.maxRoundSkip(), 7);
        vm.stopPrank();
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, stranger, bytes32(0)
            )
        );
        vm.prank(stranger);
        ledger.setDisputeWindow(1 days);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, stranger, bytes32(0)
            )
        );
        vm.prank(stranger);
        ledger.setMaxRoundSkip(1);
    }

    function test_constructor_bounds() public {
        ITrainingConfig c = ITrainingConfig(address(config));
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.InvalidDisputeWindow.selector, 0)
        );
        new ContributionLedger(address(this), c, 0, 1);
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.InvalidMaxRoundSkip.selector, 0));
        new ContributionLedger(address(this), c, 1, 0);
    }

    // ---------------------------------------------------------------- EIP-712

    function test_typehash_matchesInterfaceString() public view {
        assertEq(
            ledger.ATTESTATION_TYPEHASH(),
            keccak256(
                "ComputeAttestation(bytes32 runId,uint64 round,address node,uint64 configVersion,bytes32 baseCheckpoint,bytes32 pseudoGradient,bytes32 dataShard,uint32 innerSteps,uint64 tokens,bytes32 resultCheckpoint,bytes32 traceRoot)"
            )
        );
    }

    function test_hashAttestation_matchesHandRolledDigest() public view {
        ComputeAttestation memory a = _att(address(0xBEEF));
        bytes32 domain = keccak256(
            abi.encode(
                keccak256(
                    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
                ),
                keccak256("coloco"),
                keccak256("1"),
                block.chainid,
                address(ledger)
            )
        );
        bytes32 structHash = keccak256(
            abi.encode(
                ledger.ATTESTATION_TYPEHASH(),
                a.runId,
                uint256(a.round),
                a.node,
                uint256(a.configVersion),
                a.baseCheckpoint,
                a.pseudoGradient,
                a.dataShard,
                uint256(a.innerSteps),
                uint256(a.tokens),
                a.resultCheckpoint,
                a.traceRoot
            )
        );
        assertEq(
            ledger.hashAttestation(a), keccak256(abi.encodePacked("\x19\x01", domain, structHash))
        );
        (, string memory name, string memory version,,,,) = ledger.eip712Domain();
        assertEq(name, "coloco");
        assertEq(version, "1");
    }

    function test_verifyAttestation_returnsSigner() public {
        (address signer, uint256 pk) = makeAddrAndKey("node");
        ComputeAttestation memory a = _att(signer);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(pk, ledger.hashAttestation(a));
        assertEq(ledger.verifyAttestation(a, abi.encodePacked(r, s, v)), signer);
    }

    function test_verifyAttestation_revertsOnWrongSigner() public {
        (address signer,) = makeAddrAndKey("node");
        (address other, uint256 otherPk) = makeAddrAndKey("other");
        ComputeAttestation memory a = _att(signer);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(otherPk, ledger.hashAttestation(a));
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.WrongSigner.selector, other, signer)
        );
        ledger.verifyAttestation(a, abi.encodePacked(r, s, v));
    }

    function test_verifyAttestation_revertsOnTamperedField() public {
        (address signer, uint256 pk) = makeAddrAndKey("node");
        ComputeAttestation memory a = _att(signer);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(pk, ledger.hashAttestation(a));
        a.tokens += 1;
        vm.expectPartialRevert(IContributionLedger.WrongSigner.selector);
        ledger.verifyAttestation(a, abi.encodePacked(r, s, v));
    }

    function test_verifyAttestation_revertsOnMalformedSignature() public {
        bytes memory sig = new bytes(64);
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.InvalidSignature.selector, sig));
        ledger.verifyAttestation(_att(address(1)), sig);
    }

    function test_verifyAttestation_revertsOnHighS() public {
        (address signer, uint256 pk) = makeAddrAndKey("node");
        ComputeAttestation memory a = _att(signer);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(pk, ledger.hashAttestation(a));
        // The malleable twin (n - s, flipped v) recovers the same key; OZ ECDSA refuses it.
        uint256 n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141;
        bytes memory twin = abi.encodePacked(r, bytes32(n - uint256(s)), v == 27 ? 28 : 27);
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.InvalidSignature.selector, twin));
        ledger.verifyAttestation(a, twin);
    }

    function testFuzz_verifyAttestation_roundTrips(uint256 pk, uint64 round, uint64 tokens) public {
        pk = bound(pk, 1, 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364140);
        address signer = vm.addr(pk);
        ComputeAttestation memory a = _att(signer);
        (a.round, a.tokens) = (round, tokens);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(pk, ledger.hashAttestation(a));
        assertEq(ledger.verifyAttestation(a, abi.encodePacked(r, s, v)), signer);
    }

    /// Golden vectors shared with the Python side (tests/vectors/compute_attestation.json): the
    /// ledger's code placed at each vector's verifyingContract on its chain id must reproduce the
    /// digest and recover the signer.
    function test_goldenVectors_digestAndSigner() public {
        string memory json = vm.readFile("tests/vectors/compute_attestation.json");
        bytes memory code = address(ledger).code;
        for (uint256 i;; ++i) {
            string memory base = string.concat("[", vm.toString(i), "]");
            if (!vm.keyExistsJson(json, string.concat(".", base))) break;
            string memory m = string.concat(".", base, ".typed_data.message.");
            string memory d = string.concat(".", base, ".typed_data.domain.");
            ComputeAttestation memory a = ComputeAttestation({
                runId: vm.parseJsonBytes32(json, string.concat(m, "runId")),
                round: uint64(vm.parseJsonUint(json, string.concat(m, "round"))),
                node: vm.parseJsonAddress(json, string.concat(m, "node")),
                configVersion: uint64(vm.parseJsonUint(json, string.concat(m, "configVersion"))),
                baseCheckpoint: vm.parseJsonBytes32(json, string.concat(m, "baseCheckpoint")),
                pseudoGradient: vm.parseJsonBytes32(json, string.concat(m, "pseudoGradient")),
                dataShard: vm.parseJsonBytes32(json, string.concat(m, "dataShard")),
                innerSteps: uint32(vm.parseJsonUint(json, string.concat(m, "innerSteps"))),
                tokens: uint64(vm.parseJsonUint(json, string.concat(m, "tokens"))),
                resultCheckpoint: vm.parseJsonBytes32(json, string.concat(m, "resultCheckpoint")),
                traceRoot: vm.parseJsonBytes32(json, string.concat(m, "traceRoot"))
            });
            address at = vm.parseJsonAddress(json, string.concat(d, "verifyingContract"));
            vm.etch(at, code);
            vm.chainId(vm.parseJsonUint(json, string.concat(d, "chainId")));
            ContributionLedger l = ContributionLedger(at);
            string memory v = string.concat(".", base, ".");
            assertEq(l.hashAttestation(a), vm.parseJsonBytes32(json, string.concat(v, "digest")));
            bytes memory sig = vm.parseJsonBytes(json, string.concat(v, "signature"));
            assertEq(
                l.verifyAttestation(a, sig), vm.parseJsonAddress(json, string.concat(v, "signer"))
            );
        }
    }
}

/// Gas of commitRound with cold storage (execution only; transaction-level figures, with the
/// 21,000 base and calldata, come from anvil receipts: tests/contracts/test_gas_on_chain.py).
contract ContributionLedgerGasTest is ColocoTest {
    function setUp() public override {
        super.setUp();
        vm.startPrank(committer);
        ledger.commitRound(DEFAULT_RUN, 0, bytes32(0), keccak256("c0"), 0, bytes32(0), 0);
        ledger.commitRound(
            DEFAULT_RUN, 1, keccak256("root1"), keccak256("c1"), 1e18, keccak256("a1"), 1
        );
        vm.stopPrank();
    }

    function test_gas_commitRound_nextRound() public {
        vm.prank(committer);
        ledger.commitRound(
            DEFAULT_RUN, 2, keccak256("root2"), keccak256("c2"), 1e18, keccak256("a2"), 100e18
        );
        uint256 gasUsed = vm.snapshotGasLastCall("ContributionLedger", "exec_commitRound_nextRound");
        assertLe(gasUsed, 75_000);
    }

    function test_gas_commitRound_genesisOfNewRun() public {
        vm.prank(committer);
        ledger.commitRound(keccak256("run-2"), 0, bytes32(0), keccak256("c0"), 0, bytes32(0), 0);
        uint256 gasUsed = vm.snapshotGasLastCall("ContributionLedger", "exec_commitRound_genesis");
        assertLe(gasUsed, 75_000);
    }
}
