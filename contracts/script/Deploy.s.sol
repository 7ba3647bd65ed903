// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Script} from "forge-std/Script.sol";
import {CapitalDeploy} from "./CapitalDeploy.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
import {CodeRegistry} from "../src/CodeRegistry.sol";
import {ComputeLeases} from "../src/ComputeLeases.sol";
import {ContributionLedger} from "../src/ContributionLedger.sol";
import {ModelGovernor} from "../src/ModelGovernor.sol";
import {ModelShareToken} from "../src/ModelShareToken.sol";
import {RewardDistributor} from "../src/RewardDistributor.sol";
import {RunFunding} from "../src/RunFunding.sol";
import {StakeManager} from "../src/StakeManager.sol";
import {TrainingConfig} from "../src/TrainingConfig.sol";

/// @title Deploy
/// @notice Deploys and wires every coloco contract, then writes the deployment JSON of
/// docs/interfaces.md. COLOCO_PROFILE picks the defaults: `devnet` (anvil's chain id 31337 only:
/// refused anywhere else) or `production`. Every duration is in seconds (timestamp clock).
///
/// Env vars, [devnet default | production default]:
/// COLOCO_COMMITTER, COLOCO_TREASURY, COLOCO_GUARDIAN [the deployer, a fresh devnet address, the
/// deployer | required], COLOCO_VOTING_DELAY [1 | 1 day], COLOCO_VOTING_PERIOD [20 | 5 days],
/// COLOCO_VOTE_EXTENSION [0 | 2 days], COLOCO_QUORUM_FRACTION [4 | 4], COLOCO_TIMELOCK_DELAY
/// [1 | 2 days], COLOCO_PROPOSAL_THRESHOLD [0 | 10,000 CMS], COLOCO_GRANT_LIMIT [1,000,000 CMS
/// | 100,000 CMS] per COLOCO_GRANT_PERIOD [30 days], COLOCO_DISPUTE_WINDOW [2 | 1 day],
/// COLOCO_SLASH_DISPUTE_WINDOW [10 | 3 days], COLOCO_UNBONDING_DELAY [60 | 21 days],
/// COLOCO_MAX_ROUND_SKIP [1000], COLOCO_REPORTER_SHARE_BPS [1000], COLOCO_EQUIVOCATION_SLASH_BPS
/// [1000], COLOCO_INITIAL_INNER_STEPS [0: the contract default], COLOCO_DEPLOY_OUT
/// [deployments/<chainId>.json; must lie under ./deployments]; RunFunding's
/// COLOCO_VESTING_PERIOD [60 | 30 days], COLOCO_FUNDING_DISPUTE_WINDOW [2 | 1 day],
/// COLOCO_MAX_ETH_PER_ROOT_BPS [10,000 | 1,000: one ETH root adds at most this share of a run's
/// deposits], COLOCO_CAPITAL_LIMIT [1,000,000 CMS | 100,000 CMS] per COLOCO_CAPITAL_PERIOD
/// [30 days].
/// Production also requires: proposal threshold > 0, voting delay and period >= 1 hour, vote
/// extension >= 1 hour, timelock >= 1 day, dispute windows >= 1 hour, RunFunding's dispute window
/// and vesting period >= 1 day, ETH per root <= 1,000 bps of the deposits.
/// @dev Roles after `deploy`: ledger COMMITTER -> committer, GUARDIAN -> guardian; distributor,
/// StakeManager, RunFunding and ComputeLeases GUARDIAN -> guardian; token MINTER -> distributor (fixed, created with the
/// token), RunFunding and CodeRegistry (MINTER_ROLE, bounded by their own budgets); GRANTER -> Timelock,
/// with no token admin left; StakeManager SLASHER -> Timelock; Timelock proposer and canceller ->
/// governor, executor -> anyone; every admin -> Timelock; the deployer keeps no role anywhere
/// (on a devnet it is the default committer and guardian, which the JSON records).
contract Deploy is Script, CapitalDeploy {
    uint256 internal constant ANVIL_CHAIN_ID = 31_337;

    struct Params {
        bool production;
        address committer;
        address treasury;
        address guardian;
        uint48 votingDelay;
        uint32 votingPeriod;
        uint48 voteExtension;
        uint256 quorumFraction;
        uint256 timelockDelay;
        uint256 proposalThreshold;
        uint256 grantLimit;
        uint48 grantPeriod;
        uint64 disputeWindow;
        uint64 slashDisputeWindow;
        uint64 unbondingDelay;
        uint32 maxRoundSkip;
        uint16 reporterShareBps;
        uint16 equivocationSlashBps;
        uint32 initialInnerSteps; // zero: TrainingConfig's default
        Funding funding; // RunFunding's durations and limits
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
        ComputeLeases leases;
    }

    /// @notice The devnet profile was asked for on a chain other than anvil's.
    error DevnetProfileOffAnvil(uint256 chainId);
    /// @notice A production deployment lacks an explicit `role` address.
    error MissingRole(string role);
    /// @notice A production parameter is below its floor.
    error ProductionBound(string name, uint256 value, uint256 minimum);
    /// @notice A production parameter is above its ceiling.
    error ProductionCap(string name, uint256 value, uint256 maximum);

    /// @notice Reads the parameters from env, deploys as the broadcasting key, writes the JSON.
    function run() external returns (Deployed memory d) {
        Params memory p = paramsFromEnv();
        uint256 startBlock = block.number;
        vm.startBroadcast();
        (, address deployer,) = vm.readCallers();
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

    /// @notice The devnet parameters (anvil only).
    function devnetParams() public pure returns (Params memory p) {
        p.votingDelay = 1;
        p.votingPeriod = 20;
        p.quorumFraction = 4;
        p.timelockDelay = 1;
        p.grantLimit = 1_000_000e18;
        p.grantPeriod = 30 days;
        p.disputeWindow = 2;
        p.slashDisputeWindow = 10;
        p.unbondingDelay = 60;
        p.maxRoundSkip = 1000;
        p.reporterShareBps = 1000;
        p.equivocationSlashBps = 1000;
        p.funding = Funding({
            vestingPeriod: 60,
            disputeWindow: 2,
            maxEthPerRootBps: 10_000,
            capitalLimit: 1_000_000e18,
            capitalPeriod: 30 days
        });
    }

    /// @notice The production defaults (roles still required).
    function productionParams() public pure returns (Params memory p) {
        p.production = true;
        p.votingDelay = 1 days;
        p.votingPeriod = 5 days;
        p.voteExtension = 2 days;
        p.quorumFraction = 4;
        p.timelockDelay = 2 days;
        p.proposalThreshold = 10_000e18;
        p.grantLimit = 100_000e18;
        p.grantPeriod = 30 days;
        p.disputeWindow = 1 days;
        p.slashDisputeWindow = 3 days;
        p.unbondingDelay = 21 days;
        p.maxRoundSkip = 1000;
        p.reporterShareBps = 1000;
        p.equivocationSlashBps = 1000;
        p.funding = Funding({
            vestingPeriod: 30 days,
            disputeWindow: 1 days,
            maxEthPerRootBps: 1000,
            capitalLimit: 100_000e18,
            capitalPeriod: 30 days
        });
    }

    /// @notice The parameters from env vars over the profile's defaults.
    function paramsFromEnv() public view returns (Params memory p) {
        bool production = keccak256(bytes(vm.envOr("COLOCO_PROFILE", string("devnet"))))
            == keccak256("production");
        p = production ? productionParams() : devnetParams();
        p.committer = vm.envOr("COLOCO_COMMITTER", address(0));
        p.treasury = vm.envOr("COLOCO_TREASURY", address(0));
        p.guardian = vm.envOr("COLOCO_GUARDIAN", address(0));
        p.votingDelay = uint48(vm.envOr("COLOCO_VOTING_DELAY", uint256(p.votingDelay)));
        p.votingPeriod = uint32(vm.envOr("COLOCO_VOTING_PERIOD", uint256(p.votingPeriod)));
        p.voteExtension = uint48(vm.envOr("COLOCO_VOTE_EXTENSION", uint256(p.voteExtension)));
        p.quorumFraction = vm.envOr("COLOCO_QUORUM_FRACTION", p.quorumFraction);
        p.timelockDelay = vm.envOr("COLOCO_TIMELOCK_DELAY", p.timelockDelay);
        p.proposalThreshold = vm.envOr("COLOCO_PROPOSAL_THRESHOLD", p.proposalThreshold);
        p.grantLimit = vm.envOr("COLOCO_GRANT_LIMIT", p.grantLimit);
        p.grantPeriod = uint48(vm.envOr("COLOCO_GRANT_PERIOD", uint256(p.grantPeriod)));
        p.disputeWindow = uint64(vm.envOr("COLOCO_DISPUTE_WINDOW", uint256(p.disputeWindow)));
        p.slashDisputeWindow =
            uint64(vm.envOr("COLOCO_SLASH_DISPUTE_WINDOW", uint256(p.slashDisputeWindow)));
        p.unbondingDelay = uint64(vm.envOr("COLOCO_UNBONDING_DELAY", uint256(p.unbondingDelay)));
        p.maxRoundSkip = uint32(vm.envOr("COLOCO_MAX_ROUND_SKIP", uint256(p.maxRoundSkip)));
        p.reporterShareBps =
            uint16(vm.envOr("COLOCO_REPORTER_SHARE_BPS", uint256(p.reporterShareBps)));
        p.equivocationSlashBps =
            uint16(vm.envOr("COLOCO_EQUIVOCATION_SLASH_BPS", uint256(p.equivocationSlashBps)));
        p.initialInnerSteps = uint32(vm.envOr("COLOCO_INITIAL_INNER_STEPS", uint256(0)));
        Funding memory f = p.funding;
        f.vestingPeriod = uint64(vm.envOr("COLOCO_VESTING_PERIOD", uint256(f.vestingPeriod)));
        f.disputeWindow =
            uint64(vm.envOr("COLOCO_FUNDING_DISPUTE_WINDOW", uint256(f.disputeWindow)));
        f.maxEthPerRootBps =
            uint16(vm.envOr("COLOCO_MAX_ETH_PER_ROOT_BPS", uint256(f.maxEthPerRootBps)));
        f.capitalLimit = uint208(vm.envOr("COLOCO_CAPITAL_LIMIT", uint256(f.capitalLimit)));
        f.capitalPeriod = uint48(vm.envOr("COLOCO_CAPITAL_PERIOD", uint256(f.capitalPeriod)));
    }

    /// @notice Refuses the devnet profile off anvil and weak production settings; fills devnet
    /// role defaults.
    function checkProfile(Params memory p, address deployer) public view returns (Params memory) {
        if (!p.production) {
            if (block.chainid != ANVIL_CHAIN_ID) revert DevnetProfileOffAnvil(block.chainid);
            if (p.committer == address(0)) p.committer = deployer;
            if (p.guardian == address(0)) p.guardian = deployer;
            if (p.treasury == address(0)) {
                p.treasury = address(uint160(uint256(keccak256("coloco devnet treasury"))));
            }
            return p;
        }
        if (p.committer == address(0)) revert MissingRole("committer");
        if (p.treasury == address(0)) revert MissingRole("treasury");
        if (p.guardian == address(0)) revert MissingRole("guardian");
        _atLeast("proposalThreshold", p.proposalThreshold, 1);
        _atLeast("votingDelay", p.votingDelay, 1 hours);
        _atLeast("votingPeriod", p.votingPeriod, 1 hours);
        _atLeast("voteExtension", p.voteExtension, 1 hours);
        _atLeast("timelockDelay", p.timelockDelay, 1 days);
        _atLeast("disputeWindow", p.disputeWindow, 1 hours);
        _atLeast("slashDisputeWindow", p.slashDisputeWindow, 1 hours);
        _atLeast("fundingDisputeWindow", p.funding.disputeWindow, 1 days);
        _atLeast("vestingPeriod", p.funding.vestingPeriod, 1 days);
        _atMost("maxEthPerRootBps", p.funding.maxEthPerRootBps, 1000);
        return p;
    }

    function _atLeast(string memory name, uint256 value, uint256 minimum) private pure {
        if (value < minimum) revert ProductionBound(name, value, minimum);
    }

    function _atMost(string memory name, uint256 value, uint256 maximum) private pure {
        if (value > maximum) revert ProductionCap(name, value, maximum);
    }

    function _deploy(Params memory p, address deployer) internal returns (Deployed memory d) {
        p = checkProfile(p, deployer);
        address[] memory none = new address[](0);
        address[] memory anyone = new address[](1); // address(0) as executor: anyone may execute
        d.timelock = new TimelockController(p.timelockDelay, none, anyone, deployer);
        address timelock = address(d.timelock);
        d.config = new TrainingConfig(deployer);
        if (p.initialInnerSteps != 0) {
            d.config.setInnerLoop(p.initialInnerSteps, d.config.current().innerLrE6);
        }
        _genesisSplit(d.config);
        d.config.transferOwnership(timelock);
        d.ledger = new ContributionLedger(deployer, d.config, p.disputeWindow, p.maxRoundSkip);
        d.distributor =
            new RewardDistributor(d.ledger, deployer, deployer, p.grantLimit, p.grantPeriod);
        d.token = d.distributor.token();
        d.governor = new ModelGovernor(
            d.token,
            d.timelock,
            p.votingDelay,
            p.votingPeriod,
            p.proposalThreshold,
            p.quorumFraction,
            p.voteExtension
        );
        d.stakeManager = new StakeManager(
            StakeManager.Init({
                admin: timelock,
                guardian: p.guardian,
                config: d.config,
                ledger: d.ledger,
                governance: d.governor,
                treasury: p.treasury,
                unbondingDelay: p.unbondingDelay,
                slashDisputeWindow: p.slashDisputeWindow,
                reporterShareBps: p.reporterShareBps,
                equivocationSlashBps: p.equivocationSlashBps
            })
        );

        d.ledger.grantRole(d.ledger.COMMITTER_ROLE(), p.committer);
        d.ledger.grantRole(d.ledger.GUARDIAN_ROLE(), p.guardian);
        _handOver(address(d.ledger), timelock, deployer);
        d.distributor.grantRole(d.distributor.GUARDIAN_ROLE(), p.guardian);
        _handOver(address(d.distributor), timelock, deployer);
        d.token.grantRole(d.token.GRANTER_ROLE(), timelock);
        (d.funding, d.codeRegistry) = _deployCapital(
            d.token, d.ledger, d.config, timelock, p.committer, p.guardian, p.funding
        );
        d.token.grantRole(d.token.MINTER_ROLE(), address(d.funding));
        d.token.grantRole(d.token.MINTER_ROLE(), address(d.codeRegistry));
        d.leases = new ComputeLeases(d.ledger, timelock, p.guardian);
        d.token.renounceRole(bytes32(0), deployer);
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
        p = checkProfile(p, deployer);
        string memory c = "contracts";
        vm.serializeAddress(c, "StakeManager", address(d.stakeManager));
        vm.serializeAddress(c, "ContributionLedger", address(d.ledger));
        vm.serializeAddress(c, "ModelShareToken", address(d.token));
        vm.serializeAddress(c, "RewardDistributor", address(d.distributor));
        vm.serializeAddress(c, "TrainingConfig", address(d.config));
        vm.serializeAddress(c, "ModelGovernor", address(d.governor));
        vm.serializeAddress(c, "RunFunding", address(d.funding));
        vm.serializeAddress(c, "CodeRegistry", address(d.codeRegistry));
        vm.serializeAddress(c, "ComputeLeases", address(d.leases));
        c = vm.serializeAddress(c, "TimelockController", address(d.timelock));
        string memory g = "governance";
        vm.serializeUint(g, "voting_delay", p.votingDelay);
        vm.serializeUint(g, "voting_period", p.votingPeriod);
        vm.serializeUint(g, "vote_extension", p.voteExtension);
        vm.serializeUint(g, "quorum_fraction", p.quorumFraction);
        vm.serializeUint(g, "dispute_window", p.disputeWindow);
        vm.serializeUint(g, "slash_dispute_window", p.slashDisputeWindow);
        vm.serializeUint(g, "unbonding_delay", p.unbondingDelay);
        g = vm.serializeUint(g, "timelock_delay", p.timelockDelay);
        string memory r = "root";
        vm.serializeUint(r, "chain_id", block.chainid);
        vm.serializeUint(r, "deployment_block", startBlock + 1);
        vm.serializeAddress(r, "deployer", deployer);
        vm.serializeAddress(r, "committer", p.committer);
        vm.serializeAddress(r, "treasury", p.treasury);
        vm.serializeAddress(r, "guardian", p.guardian);
        vm.serializeString(r, "contracts", c);
        return vm.serializeString(r, "governance", g);
    }
}
