// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
import {Deploy} from "../../script/Deploy.s.sol";
import {CodeRegistry} from "../../src/CodeRegistry.sol";
import {ComputeLeases} from "../../src/ComputeLeases.sol";
import {ContributionLedger} from "../../src/ContributionLedger.sol";
import {ModelGovernor} from "../../src/ModelGovernor.sol";
import {ModelShareToken} from "../../src/ModelShareToken.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {RunFunding} from "../../src/RunFunding.sol";
import {StakeManager} from "../../src/StakeManager.sol";
import {TrainingConfig} from "../../src/TrainingConfig.sol";
import {IStakeManager} from "../../src/interfaces/IStakeManager.sol";

/// @notice Base for contract tests: the whole system deployed and wired by the real Deploy
/// script, with named actors. Privileged calls are made by pranking the Timelock or committer.
abstract contract ColocoTest is Test {
    uint64 internal constant UNBONDING = 7 days;
    uint64 internal constant DISPUTE = 1 hours;
    uint64 internal constant SLASH_DISPUTE = 2 days;
    uint256 internal constant GRANT_LIMIT = 1_000_000e18;
    bytes32 internal constant DEFAULT_RUN = bytes32(uint256(1));

    address internal committer = makeAddr("committer");
    address internal treasury = makeAddr("treasury");
    address internal guardian = makeAddr("guardian");
    address internal operator = makeAddr("operator");
    address internal payout = makeAddr("payout");
    address internal node;
    uint256 internal nodeKey;
    address internal stranger = makeAddr("stranger");

    StakeManager internal stakeManager;
    ContributionLedger internal ledger;
    ModelShareToken internal token;
    RewardDistributor internal distributor;
    TrainingConfig internal config;
    ModelGovernor internal governor;
    TimelockController internal timelock;
    RunFunding internal funding;
    CodeRegistry internal codeRegistry;
    ComputeLeases internal leases;

    function _params() internal virtual returns (Deploy.Params memory p) {
        p = new Deploy().devnetParams();
        p.committer = committer;
        p.treasury = treasury;
        p.guardian = guardian;
        p.unbondingDelay = UNBONDING;
        p.disputeWindow = DISPUTE;
        p.slashDisputeWindow = SLASH_DISPUTE;
        p.grantLimit = GRANT_LIMIT;
    }

    function setUp() public virtual {
        (node, nodeKey) = makeAddrAndKey("node");
        vm.warp(1_700_000_000);
        Deploy.Deployed memory d = new Deploy().deploy(_params());
        stakeManager = d.stakeManager;
        ledger = d.ledger;
        token = d.token;
        distributor = d.distributor;
        config = d.config;
        governor = d.governor;
        timelock = d.timelock;
        funding = d.funding;
        codeRegistry = d.codeRegistry;
        leases = d.leases;
        vm.deal(operator, 1000 ether);
        vm.deal(stranger, 1000 ether);
    }

    /// @dev The node key's proof of possession for `operator_` and `payout_`.
    function _keyProof(uint256 key, address operator_, address payout_, uint256 deadline)
        internal
        view
        returns (bytes memory)
    {
        bytes32 digest = stakeManager.hashNodeKeyProof(
            IStakeManager.NodeKeyProof({
                operator: operator_,
                payout: payout_,
                nonce: stakeManager.nonces(vm.addr(key)),
                deadline: deadline
            })
        );
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, digest);
        return abi.encodePacked(r, s, v);
    }

    /// @dev Registers key `key` for `operator` (with its proof).
    function _register(uint256 key) internal {
        address n = vm.addr(key);
        bytes memory sig = _keyProof(key, operator, payout, block.timestamp + 1 hours);
        vm.prank(operator);
        stakeManager.register(n, payout, block.timestamp + 1 hours, sig);
    }

    /// @dev Registers `node` for `operator` and stakes `amount` for it.
    function _registerAndStake(uint256 key, uint256 amount) internal {
        _register(key);
        vm.prank(operator);
        stakeManager.stake{value: amount}(vm.addr(key));
    }

    /// @dev Commits the next round of DEFAULT_RUN with `root` and `reward` (genesis first if needed).
    function _commit(bytes32 root, uint256 reward) internal {
        if (!ledger.hasCommitted(DEFAULT_RUN)) {
            vm.prank(committer);
            ledger.commitRound(DEFAULT_RUN, 0, bytes32(0), keccak256("genesis"), 0, bytes32(0), 0);
        }
        uint64 round = ledger.lastRound(DEFAULT_RUN) + 1;
        vm.prank(committer);
        ledger.commitRound(
            DEFAULT_RUN, round, root, keccak256(abi.encode(round)), 1, bytes32(0), reward
        );
    }

    /// @dev Commits `root` with the full per-round budget (none if the root was committed
    /// before: the tree did not change) and lets its dispute window pass.
    function _commitRoot(bytes32 root) internal {
        _commit(root, ledger.rootInfo(root).index == 0 ? config.rewardPerRound() : 0);
        vm.warp(block.timestamp + DISPUTE);
    }
}
