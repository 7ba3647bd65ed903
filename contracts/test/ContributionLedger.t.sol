// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {ContributionLedger} from "../src/ContributionLedger.sol";
import {ComputeAttestation, IContributionLedger} from "../src/interfaces/IContributionLedger.sol";

contract ContributionLedgerTest is Test {
    event RoundCommitted(
        bytes32 indexed runId,
        uint64 indexed round,
        bytes32 rewardsRoot,
        bytes32 checkpointHash,
        uint256 totalWork,
        bytes32 attestationsRoot
    );

    bytes32 internal constant RUN = keccak256("run-1");
    address internal committer = makeAddr("committer");
    ContributionLedger internal ledger;

    function setUp() public {
        ledger = new ContributionLedger(address(this));
        ledger.grantRole(ledger.COMMITTER_ROLE(), committer);
    }

    function _commit(bytes32 run, uint64 round, bytes32 root) internal {
        vm.prank(committer);
        ledger.commitRound(run, round, root, keccak256(abi.encode(run, round)), 7, keccak256("a"));
    }

    function _att(address signer) internal pure returns (ComputeAttestation memory a) {
        a = ComputeAttestation({
            runId: RUN,
            round: 3,
            node: signer,
            configVersion: 2,
            baseCheckpoint: keccak256("base"),
            pseudoGradient: keccak256("pg"),
            dataShard: keccak256("shard"),
            innerSteps: 50,
            tokens: 1_024_000,
            resultCheckpoint: keccak256("result")
        });
    }

    // ---------------------------------------------------------------- commitRound

    function test_commitRound_genesisThenIncreasingRounds() public {
        assertFalse(ledger.hasCommitted(RUN));
        vm.expectEmit(address(ledger));
        emit RoundCommitted(RUN, 0, bytes32(0), keccak256(abi.encode(RUN, 0)), 7, keccak256("a"));
        _commit(RUN, 0, bytes32(0));
        assertTrue(ledger.hasCommitted(RUN));
        assertEq(ledger.lastRound(RUN), 0);
        assertEq(ledger.checkpointOf(RUN, 0), keccak256(abi.encode(RUN, uint64(0))));
        assertEq(ledger.latestRewardsRoot(), bytes32(0));
        _commit(RUN, 1, keccak256("root1"));
        _commit(RUN, 5, keccak256("root5"));
        assertEq(ledger.lastRound(RUN), 5);
        assertEq(ledger.latestRewardsRoot(), keccak256("root5"));
        assertEq(ledger.checkpointOf(RUN, 1), keccak256(abi.encode(RUN, uint64(1))));
        assertEq(ledger.checkpointOf(RUN, 2), bytes32(0));
    }

    function test_commitRound_zeroRootKeepsLatestRoot() public {
        _commit(RUN, 1, keccak256("root1"));
        _commit(keccak256("run-2"), 0, bytes32(0));
        assertEq(ledger.latestRewardsRoot(), keccak256("root1"));
    }

    function test_commitRound_runsAreIndependent() public {
        _commit(RUN, 9, keccak256("r"));
        _commit(keccak256("run-2"), 0, bytes32(0));
        assertEq(ledger.lastRound(keccak256("run-2")), 0);
        assertEq(ledger.lastRound(RUN), 9);
    }

    function test_commitRound_revertsWhenNotCommitter() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector,
                address(this),
                ledger.COMMITTER_ROLE()
            )
        );
        ledger.commitRound(RUN, 0, bytes32(0), keccak256("c"), 0, bytes32(0));
    }

    function test_commitRound_revertsOnRepeatedRound() public {
        _commit(RUN, 0, bytes32(0));
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RoundNotIncreasing.selector, RUN, 0, 0)
        );
        _commit(RUN, 0, bytes32(0));
    }

    function test_commitRound_revertsOnLowerRound() public {
        _commit(RUN, 4, keccak256("r"));
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RoundNotIncreasing.selector, RUN, 3, 4)
        );
        _commit(RUN, 3, keccak256("r"));
    }

    function test_commitRound_revertsOnZeroCheckpoint() public {
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.ZeroCheckpoint.selector, RUN, 1));
        vm.prank(committer);
        ledger.commitRound(RUN, 1, keccak256("r"), bytes32(0), 0, bytes32(0));
    }

    function testFuzz_commitRound_acceptsOnlyStrictlyIncreasingRounds(uint64 a, uint64 b) public {
        _commit(RUN, a, keccak256("r"));
        if (b <= a) {
            vm.expectRevert(
                abi.encodeWithSelector(IContributionLedger.RoundNotIncreasing.selector, RUN, b, a)
            );
        }
        _commit(RUN, b, keccak256("r"));
        assertEq(ledger.lastRound(RUN), b > a ? b : a);
    }

    // ---------------------------------------------------------------- EIP-712

    function test_typehash_matchesInterfaceString() public view {
        assertEq(
            ledger.ATTESTATION_TYPEHASH(),
            keccak256(
                "ComputeAttestation(bytes32 runId,uint64 round,address node,uint64 configVersion,bytes32 baseCheckpoint,bytes32 pseudoGradient,bytes32 dataShard,uint32 innerSteps,uint64 tokens,bytes32 resultCheckpoint)"
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
                a.resultCheckpoint
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
                resultCheckpoint: vm.parseJsonBytes32(json, string.concat(m, "resultCheckpoint"))
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

/// Gas of commitRound with cold storage, as the committer's transaction sees it (execution only;
/// the 21,000 base and calldata cost come on top). Committed in contracts/snapshots/.
contract ContributionLedgerGasTest is Test {
    bytes32 internal constant RUN = keccak256("run-1");
    address internal committer = makeAddr("committer");
    ContributionLedger internal ledger;

    function setUp() public {
        ledger = new ContributionLedger(address(this));
        ledger.grantRole(ledger.COMMITTER_ROLE(), committer);
        vm.startPrank(committer);
        ledger.commitRound(RUN, 0, bytes32(0), keccak256("c0"), 0, bytes32(0));
        ledger.commitRound(RUN, 1, keccak256("root1"), keccak256("c1"), 1e18, keccak256("a1"));
        vm.stopPrank();
    }

    function test_gas_commitRound_nextRound() public {
        vm.prank(committer);
        ledger.commitRound(RUN, 2, keccak256("root2"), keccak256("c2"), 1e18, keccak256("a2"));
        uint256 gasUsed = vm.snapshotGasLastCall("ContributionLedger", "commitRound_nextRound");
        assertLe(gasUsed, 60_000);
    }

    function test_gas_commitRound_genesisOfNewRun() public {
        vm.prank(committer);
        ledger.commitRound(keccak256("run-2"), 0, bytes32(0), keccak256("c0"), 0, bytes32(0));
        uint256 gasUsed = vm.snapshotGasLastCall("ContributionLedger", "commitRound_genesis");
        assertLe(gasUsed, 60_000);
    }
}
