// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Script} from "forge-std/Script.sol";
import {CapitalDeploy} from "./CapitalDeploy.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
import {CodeRegistry} from "../src/CodeRegistry.sol";
import {ContributionLedger} from "../src/ContributionLedger.sol";
import {ModelGovernor} from "../src/ModelGovernor.sol";
import {ModelShareToken} from "../src/ModelShareToken.sol";
import {RewardDistributor} from "../src/RewardDistributor.sol";
import {RunFunding} from "../src/RunFunding.sol";
import {StakeManager} from "../src/StakeManager.sol";
import {TrainingConfig} from "../src/TrainingConfig.sol";

/// @title Deploy
/// @notice Deploys and wires every coloco contract, then writes the deployment JSON of
/// docs/interfaces.md. Parameters come from env vars (devnet defaults in brackets):
/// COLOCO_COMMITTER [the deployer], COLOCO_TREASURY [the Timelock], COLOCO_VOTING_DELAY [1 block],
/// COLOCO_VOTING_PERIOD [20 blocks], COLOCO_QUORUM_FRACTION [4 %], COLOCO_TIMELOCK_DELAY [1 s],
/// COLOCO_UNBONDING_DELAY [60 s], COLOCO_GRANT_CAP [1,000,000 CMS], COLOCO_PROPOSAL_THRESHOLD [0],
/// COLOCO_INITIAL_INNER_STEPS [0: the contract default; the run's genesis H, set before the
/// Timelock takes ownership, so later changes go through governance only],
/// COLOCO_DEPLOY_OUT [deployments/<chainId>.json; must lie under ./deployments].
/// @dev Roles after `deploy`: ledger COMMITTER -> committer; token MINTER -> distributor and
/// GRANTER -> Timelock, with no token admin left (nobody can add a minter); StakeManager SLASHER
/// -> Timelock; Timelock proposer and canceller -> governor, executor -> anyone; ledger and
/// StakeManager admin -> Timelock; the deployer keeps no role anywhere.
contract Deploy is Script, CapitalDeploy {
    struct Params {
        address committer;
        address treasury; // zero: the Timelock
        uint48 votingDelay;
        uint32 votingPeriod;
        uint256 quorumFraction;
        uint256 timelockDelay;
        uint64 unbondingDelay;
        uint256 grantCap;
        uint256 proposalThreshold;
        uint32 initialInnerSteps; // zero: TrainingConfig's default
    }

    struct Deployed {
        StakeManager stakeManager;
        ContributionLedger ledger;
        ModelShareToken token;
        RewardDistributor distributor;
        TrainingConfig config;
        ModelGovernor governor;
        TimelockController timelock;
        RunFunding funding;
        CodeRegistry codeRegistry;
    }

    /// @notice Reads the parameters from env, deploys as the broadcasting key, writes the JSON.
    function run() external returns (Deployed memory d) {
        Params memory p = paramsFromEnv();
        uint256 startBlock = block.number;
        vm.startBroadcast();
        (, address deployer,) = vm.readCallers();
        if (p.committer == address(0)) p.committer = deployer;
        d = _deploy(p, deployer);
        vm.stopBroadcast();
        string memory path = vm.envOr(
            "COLOCO_DEPLOY_OUT", string.concat("deployments/", vm.toString(block.chainid), ".json")
        );
        vm.writeJson(_json(p, d, deployer, startBlock), path);
    }

    /// @notice Deploys with this contract as the deployer (for tests).
    function deploy(Params memory p) external returns (Deployed memory) {
        return _deploy(p, address(this));
    }

    /// @notice The parameters from env vars, with devnet defaults.
    function paramsFromEnv() public view returns (Params memory p) {
        p.committer = vm.envOr("COLOCO_COMMITTER", address(0));
        p.treasury = vm.envOr("COLOCO_TREASURY", address(0));
        p.votingDelay = uint48(vm.envOr("COLOCO_VOTING_DELAY", uint256(1)));
        p.votingPeriod = uint32(vm.envOr("COLOCO_VOTING_PERIOD", uint256(20)));
        p.quorumFraction = vm.envOr("COLOCO_QUORUM_FRACTION", uint256(4));
        p.timelockDelay = vm.envOr("COLOCO_TIMELOCK_DELAY", uint256(1));
        p.unbondingDelay = uint64(vm.envOr("COLOCO_UNBONDING_DELAY", uint256(60)));
        p.grantCap = vm.envOr("COLOCO_GRANT_CAP", uint256(1_000_000e18));
        p.proposalThreshold = vm.envOr("COLOCO_PROPOSAL_THRESHOLD", uint256(0));
        p.initialInnerSteps = uint32(vm.envOr("COLOCO_INITIAL_INNER_STEPS", uint256(0)));
    }

    function _deploy(Params memory p, address deployer) internal returns (Deployed memory d) {
        address[] memory none = new address[](0);
        address[] memory anyone = new address[](1); // address(0) as executor: anyone may execute
        d.timelock = new TimelockController(p.timelockDelay, none, anyone, deployer);
        address timelock = address(d.timelock);
        d.token = new ModelShareToken(deployer, p.grantCap);
        d.governor = new ModelGovernor(
            d.token,
            d.timelock,
            p.votingDelay,
            p.votingPeriod,
            p.proposalThreshold,
            p.quorumFraction
        );
        d.config = new TrainingConfig(deployer);
        if (p.initialInnerSteps != 0) {
            d.config.setInnerLoop(p.initialInnerSteps, d.config.current().innerLrE6);
        }
        _genesisSplit(d.config);
        d.config.transferOwnership(timelock);
        d.ledger = new ContributionLedger(deployer);
        d.distributor = new RewardDistributor(d.token, d.ledger);
        address treasury = p.treasury == address(0) ? timelock : p.treasury;
        d.stakeManager = new StakeManager(deployer, d.config, treasury, p.unbondingDelay);

        d.ledger.grantRole(d.ledger.COMMITTER_ROLE(), p.committer);
        _handOver(address(d.ledger), timelock, deployer);
        d.token.grantRole(d.token.MINTER_ROLE(), address(d.distributor));
        d.token.grantRole(d.token.GRANTER_ROLE(), timelock);
        (d.funding, d.codeRegistry) =
            _deployCapital(d.token, d.ledger, d.config, timelock, p.committer);
        d.token.grantRole(d.token.MINTER_ROLE(), address(d.funding));
        d.token.grantRole(d.token.MINTER_ROLE(), address(d.codeRegistry));
        d.token.renounceRole(bytes32(0), deployer);
        d.stakeManager.grantRole(d.stakeManager.SLASHER_ROLE(), timelock);
        _handOver(address(d.stakeManager), timelock, deployer);
        d.timelock.grantRole(d.timelock.PROPOSER_ROLE(), address(d.governor));
        d.timelock.grantRole(d.timelock.CANCELLER_ROLE(), address(d.governor));
        d.timelock.renounceRole(bytes32(0), deployer);
    }

    /// @dev Gives DEFAULT_ADMIN_ROLE (0x00) of `target` to `admin` and drops the deployer's.
    function _handOver(address target, address admin, address deployer) private {
        ContributionLedger(target).grantRole(bytes32(0), admin);
        ContributionLedger(target).renounceRole(bytes32(0), deployer);
    }

    function _json(Params memory p, Deployed memory d, address deployer, uint256 startBlock)
        private
        returns (string memory)
    {
        string memory c = "contracts";
        vm.serializeAddress(c, "StakeManager", address(d.stakeManager));
        vm.serializeAddress(c, "ContributionLedger", address(d.ledger));
        vm.serializeAddress(c, "ModelShareToken", address(d.token));
        vm.serializeAddress(c, "RewardDistributor", address(d.distributor));
        vm.serializeAddress(c, "TrainingConfig", address(d.config));
        vm.serializeAddress(c, "ModelGovernor", address(d.governor));
        vm.serializeAddress(c, "RunFunding", address(d.funding));
        vm.serializeAddress(c, "CodeRegistry", address(d.codeRegistry));
        c = vm.serializeAddress(c, "TimelockController", address(d.timelock));
        string memory g = "governance";
        vm.serializeUint(g, "voting_delay", p.votingDelay);
        vm.serializeUint(g, "voting_period", p.votingPeriod);
        vm.serializeUint(g, "quorum_fraction", p.quorumFraction);
        g = vm.serializeUint(g, "timelock_delay", p.timelockDelay);
        string memory r = "root";
        vm.serializeUint(r, "chain_id", block.chainid);
        vm.serializeUint(r, "deployment_block", startBlock + 1);
        vm.serializeAddress(r, "deployer", deployer);
        vm.serializeAddress(r, "committer", p.committer);
        vm.serializeString(r, "contracts", c);
        return vm.serializeString(r, "governance", g);
    }
}
