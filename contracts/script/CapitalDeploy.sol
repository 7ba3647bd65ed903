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
/// COLOCO_VESTING_PERIOD [60 s], COLOCO_FUNDING_DISPUTE_WINDOW [2 s],
/// COLOCO_CODE_COMMITTEE [none: governance appoints], COLOCO_CODE_BUDGET [1,000 CMS per period],
/// COLOCO_CODE_BUDGET_PERIOD [1 day], COLOCO_CODE_VOTE_THRESHOLD [100 CMS].
abstract contract CapitalDeploy is Script {
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
        address guardian
    ) internal returns (RunFunding funding, CodeRegistry registry) {
        address[] memory noone = new address[](0);
        funding = new RunFunding(
            IERC20(address(token)),
            ledger,
            config,
            timelock,
            committer,
            guardian,
            uint64(vm.envOr("COLOCO_VESTING_PERIOD", uint256(60))),
            uint64(vm.envOr("COLOCO_FUNDING_DISPUTE_WINDOW", uint256(2)))
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
