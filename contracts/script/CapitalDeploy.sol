// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Script} from "forge-std/Script.sol";
import {CodeRegistry} from "../src/CodeRegistry.sol";
import {RunFunding} from "../src/RunFunding.sol";
import {TrainingConfig} from "../src/TrainingConfig.sol";
import {IContributionLedger} from "../src/interfaces/IContributionLedger.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IModelShareToken} from "../src/interfaces/IModelShareToken.sol";

/// @title CapitalDeploy
/// @notice The capital and code part of the deploy (RunFunding, CodeRegistry, the genesis
/// ownership split), kept beside Deploy.s.sol, which calls it. Parameters from env vars (devnet
/// defaults in brackets): COLOCO_OWNERSHIP_SPLIT [10000,0,0: compute, code, capital bps],
/// COLOCO_CODE_COMMITTEE [none: governance appoints], COLOCO_CODE_BUDGET [1,000 CMS per period],
/// COLOCO_CODE_BUDGET_PERIOD [1 day], COLOCO_CODE_VOTE_THRESHOLD [100 CMS]. RunFunding's
/// durations and limits are the profile's (`Funding`, in Deploy.Params, bounded by checkProfile).
abstract contract CapitalDeploy is Script {
    /// @notice RunFunding's governed durations and limits (see RunFunding.Init).
    struct Funding {
        uint64 vestingPeriod;
        uint64 disputeWindow;
        uint16 maxEthPerRootBps;
        uint208 capitalLimit;
        uint48 capitalPeriod;
    }

    /// @dev Sets the genesis split while the deployer still owns TrainingConfig.
    function _genesisSplit(TrainingConfig config) internal {
        uint256[] memory none = new uint256[](0);
        uint256[] memory split = vm.envOr("COLOCO_OWNERSHIP_SPLIT", ",", none);
        if (split.length == 0) return;
        require(split.length == 3, "COLOCO_OWNERSHIP_SPLIT: compute,code,capital basis points");
        config.setOwnershipSplit(uint16(split[0]), uint16(split[1]), uint16(split[2]));
    }

    /// @dev Deploys RunFunding and CodeRegistry with governance (`timelock`) as admin and the
    /// deployment's one `guardian` (the profile's, checked by Deploy.checkProfile: explicit
    /// outside the devnet). The caller grants them MINTER_ROLE on the token before renouncing
    /// the token's admin.
    function _deployCapital(
        IModelShareToken token,
        IContributionLedger ledger,
        TrainingConfig config,
        address timelock,
        address committer,
        address guardian,
        Funding memory f
    ) internal returns (RunFunding funding, CodeRegistry registry) {
        address[] memory noone = new address[](0);
        funding = new RunFunding(
            RunFunding.Init({
                token: IERC20(address(token)),
                ledger: ledger,
                config: config,
                admin: timelock,
                committer: committer,
                guardian: guardian,
                vestingPeriod: f.vestingPeriod,
                disputeWindow: f.disputeWindow,
                maxEthPerRootBps: f.maxEthPerRootBps,
                capitalLimit: f.capitalLimit,
                capitalPeriod: f.capitalPeriod
            })
        );
        registry = new CodeRegistry(
            token,
            ledger,
            config,
            timelock,
            vm.envOr("COLOCO_CODE_COMMITTEE", ",", noone),
            uint208(vm.envOr("COLOCO_CODE_BUDGET", uint256(1000e18))),
            uint48(vm.envOr("COLOCO_CODE_BUDGET_PERIOD", uint256(1 days))),
            vm.envOr("COLOCO_CODE_VOTE_THRESHOLD", uint256(100e18))
        );
    }
}
