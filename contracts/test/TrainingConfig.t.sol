// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {TrainingConfig} from "../src/TrainingConfig.sol";
import {ITrainingConfig} from "../src/interfaces/ITrainingConfig.sol";

contract TrainingConfigTest is Test {
    event ConfigUpdated(uint64 indexed version, bytes32 indexed field);

    bytes32 internal constant INNER_LR = "innerLrE6";
    bytes32 internal constant OUTER_LR = "outerLrE6";
    address internal owner = makeAddr("timelock");
    TrainingConfig internal config;

    function setUp() public {
        config = new TrainingConfig(owner);
    }

    function test_constructor_setsDefaults() public view {
        ITrainingConfig.Config memory c = config.current();
        assertEq(config.version(), 1);
        assertEq(config.owner(), owner);
        assertEq(c.innerSteps, 50);
        assertEq(c.innerLrE6, 3000);
        assertEq(c.outerLrE6, 900_000);
        assertEq(c.outerMomentumE6, 900_000);
        assertEq(c.wireFormat, 2);
        assertEq(c.maxNodes, 64);
        assertEq(c.minStake, 1 ether);
        assertEq(config.minStake(), 1 ether);
        assertEq(c.rewardPerRound, 100e18);
        assertEq(c.dataMixtureBps.length, 1);
        assertEq(c.dataMixtureBps[0], 10_000);
        assertEq(c.dataRoot, config.DEFAULT_DATA_ROOT());
        assertTrue(c.dataRoot != bytes32(0));
        assertEq(c.releasedCheckpoint, bytes32(0));
        assertEq(bytes(c.releasedCheckpointURI).length, 0);
    }

    function test_setInnerLoop_updatesAndBumpsVersion() public {
        vm.expectEmit(address(config));
        emit ConfigUpdated(2, "innerLoop");
        vm.prank(owner);
        config.setInnerLoop(100, 2000);
        assertEq(config.version(), 2);
        assertEq(config.current().innerSteps, 100);
        assertEq(config.current().innerLrE6, 2000);
    }

    function test_setInnerLoop_revertsOnZeroOrHugeSteps() public {
        vm.startPrank(owner);
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidInnerSteps.selector, 0));
        config.setInnerLoop(0, 1000);
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidInnerSteps.selector, 100_001));
        config.setInnerLoop(100_001, 1000);
        vm.expectRevert(
            abi.encodeWithSelector(ITrainingConfig.InvalidLearningRate.selector, INNER_LR, 0)
        );
        config.setInnerLoop(10, 0);
        vm.stopPrank();
        assertEq(config.version(), 1);
    }

    function test_setInnerLoop_revertsWhenNotOwner() public {
        vm.expectRevert(
            abi.encodeWithSelector(Ownable.OwnableUnauthorizedAccount.selector, address(this))
        );
        config.setInnerLoop(10, 10);
    }

    function test_everySetter_revertsWhenNotOwner() public {
        bytes[] memory calls = new bytes[](10);
        calls[0] = abi.encodeCall(TrainingConfig.setInnerLoop, (10, 10));
        calls[1] = abi.encodeCall(TrainingConfig.setOuterOptimizer, (10, 10));
        calls[2] = abi.encodeCall(TrainingConfig.setWireFormat, (1));
        calls[3] = abi.encodeCall(TrainingConfig.setMaxNodes, (3));
        calls[4] = abi.encodeCall(TrainingConfig.setMinStake, (3));
        calls[5] = abi.encodeCall(TrainingConfig.setRewardPerRound, (3));
        calls[6] = abi.encodeCall(TrainingConfig.setDataMixture, (new uint16[](1)));
        calls[7] = abi.encodeCall(TrainingConfig.releaseCheckpoint, (keccak256("w"), "u"));
        calls[8] = abi.encodeCall(TrainingConfig.setDataRoot, (keccak256("data")));
        calls[9] = abi.encodeCall(TrainingConfig.setTraceInterval, (2));
        for (uint256 i; i < calls.length; ++i) {
            vm.prank(makeAddr("stranger"));
            (bool ok, bytes memory ret) = address(config).call(calls[i]);
            assertFalse(ok);
            assertEq(bytes4(ret), Ownable.OwnableUnauthorizedAccount.selector);
        }
        assertEq(config.version(), 1);
    }

    function test_setOuterOptimizer_updates() public {
        vm.expectEmit(address(config));
        emit ConfigUpdated(2, "outerOptimizer");
        vm.prank(owner);
        config.setOuterOptimizer(500_000, 0);
        assertEq(config.current().outerLrE6, 500_000);
        assertEq(config.current().outerMomentumE6, 0);
    }

    function test_setOuterOptimizer_revertsOnBadValues() public {
        vm.startPrank(owner);
        vm.expectRevert(
            abi.encodeWithSelector(
                ITrainingConfig.InvalidLearningRate.selector, OUTER_LR, 10_000_001
            )
        );
        config.setOuterOptimizer(10_000_001, 0);
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidMomentum.selector, 1_000_000));
        config.setOuterOptimizer(700_000, 1_000_000);
        vm.stopPrank();
    }

    function test_setWireFormat_updatesAndRejectsUnknown() public {
        vm.startPrank(owner);
        config.setWireFormat(1);
        assertEq(config.current().wireFormat, 1);
        config.setWireFormat(3); // sparse top-k (reference/codec/sparse.py): the highest code
        assertEq(config.current().wireFormat, 3);
        assertEq(config.MAX_WIRE_FORMAT(), 3);
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidWireFormat.selector, 4));
        config.setWireFormat(4);
        vm.stopPrank();
        assertEq(config.version(), 3);
    }

    function test_setTraceInterval_updatesAndRejectsZeroAndAboveBound() public {
        assertEq(config.current().traceInterval, 5); // H / 10 at the default H 50
        vm.startPrank(owner);
        vm.expectEmit(address(config));
        emit ConfigUpdated(2, "traceInterval");
        config.setTraceInterval(10);
        assertEq(config.current().traceInterval, 10);
        config.setTraceInterval(config.MAX_TRACE_INTERVAL());
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidTraceInterval.selector, 0));
        config.setTraceInterval(0);
        uint32 above = config.MAX_TRACE_INTERVAL() + 1;
        vm.expectRevert(
            abi.encodeWithSelector(ITrainingConfig.InvalidTraceInterval.selector, above)
        );
        config.setTraceInterval(above);
        vm.stopPrank();
        assertEq(config.version(), 3);
        assertEq(config.current().traceInterval, config.MAX_TRACE_INTERVAL());
    }

    function test_setMaxNodes_updatesAndRejectsZero() public {
        vm.startPrank(owner);
        vm.expectEmit(address(config));
        emit ConfigUpdated(2, "maxNodes");
        config.setMaxNodes(8);
        assertEq(config.current().maxNodes, 8);
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidMaxNodes.selector, 0));
        config.setMaxNodes(0);
        vm.stopPrank();
    }

    function test_setMinStake_updatesAndRejectsZero() public {
        vm.startPrank(owner);
        config.setMinStake(5 ether);
        assertEq(config.minStake(), 5 ether);
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidMinStake.selector, 0));
        config.setMinStake(0);
        vm.stopPrank();
    }

    function test_setRewardPerRound_updatesAndRejectsHuge() public {
        vm.startPrank(owner);
        config.setRewardPerRound(0);
        assertEq(config.current().rewardPerRound, 0);
        uint256 tooMuch = config.MAX_REWARD_PER_ROUND() + 1;
        vm.expectRevert(
            abi.encodeWithSelector(ITrainingConfig.InvalidRewardPerRound.selector, tooMuch)
        );
        config.setRewardPerRound(tooMuch);
        vm.stopPrank();
    }

    function test_setDataMixture_updates() public {
        uint16[] memory mix = new uint16[](3);
        (mix[0], mix[1], mix[2]) = (5000, 3000, 2000);
        vm.expectEmit(address(config));
        emit ConfigUpdated(2, "dataMixture");
        vm.prank(owner);
        config.setDataMixture(mix);
        uint16[] memory got = config.current().dataMixtureBps;
        assertEq(got.length, 3);
        assertEq(got[1], 3000);
    }

    function test_setDataMixture_revertsOnBadSumOrLength() public {
        uint16[] memory mix = new uint16[](2);
        (mix[0], mix[1]) = (5000, 4999);
        vm.startPrank(owner);
        vm.expectRevert(
            abi.encodeWithSelector(ITrainingConfig.InvalidDataMixture.selector, 2, 9999)
        );
        config.setDataMixture(mix);
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidDataMixture.selector, 0, 0));
        config.setDataMixture(new uint16[](0));
        uint16[] memory wide = new uint16[](33);
        wide[0] = 10_000;
        vm.expectRevert(
            abi.encodeWithSelector(ITrainingConfig.InvalidDataMixture.selector, 33, 10_000)
        );
        config.setDataMixture(wide);
        vm.stopPrank();
    }

    function test_setDataRoot_updatesAndRefusesZero() public {
        vm.startPrank(owner);
        vm.expectEmit(address(config));
        emit ConfigUpdated(2, "dataRoot");
        config.setDataRoot(keccak256("data"));
        assertEq(config.current().dataRoot, keccak256("data"));
        assertEq(config.version(), 2);
        vm.expectRevert(abi.encodeWithSelector(ITrainingConfig.InvalidDataRoot.selector, 0));
        config.setDataRoot(bytes32(0));
        vm.stopPrank();
        assertEq(config.current().dataRoot, keccak256("data"));
        assertEq(config.version(), 2);
    }

    function test_releaseCheckpoint_updatesAndValidates() public {
        vm.startPrank(owner);
        vm.expectEmit(address(config));
        emit ConfigUpdated(2, "releasedCheckpoint");
        config.releaseCheckpoint(keccak256("w"), "ipfs://weights");
        assertEq(config.current().releasedCheckpoint, keccak256("w"));
        assertEq(config.current().releasedCheckpointURI, "ipfs://weights");
        vm.expectRevert(
            abi.encodeWithSelector(ITrainingConfig.InvalidReleasedCheckpoint.selector, 0, 3)
        );
        config.releaseCheckpoint(bytes32(0), "uri");
        vm.expectRevert(
            abi.encodeWithSelector(
                ITrainingConfig.InvalidReleasedCheckpoint.selector, keccak256("w"), 0
            )
        );
        config.releaseCheckpoint(keccak256("w"), "");
        vm.stopPrank();
    }

    function testFuzz_setters_bumpVersionOncePerChange(uint8 changes, uint32 steps) public {
        changes = uint8(bound(changes, 1, 20));
        steps = uint32(bound(steps, 1, 100_000));
        vm.startPrank(owner);
        for (uint256 i; i < changes; ++i) {
            config.setInnerLoop(steps, 1);
        }
        vm.stopPrank();
        assertEq(config.version(), 1 + uint64(changes));
        assertEq(config.current().innerSteps, steps);
    }

    function testFuzz_setDataMixture_acceptsOnlySumsOf10000(uint16 a, uint16 b) public {
        uint16[] memory mix = new uint16[](2);
        (mix[0], mix[1]) = (a, b);
        vm.prank(owner);
        if (uint256(a) + b != 10_000) {
            vm.expectRevert(
                abi.encodeWithSelector(
                    ITrainingConfig.InvalidDataMixture.selector, 2, uint256(a) + b
                )
            );
        }
        config.setDataMixture(mix);
    }
}
