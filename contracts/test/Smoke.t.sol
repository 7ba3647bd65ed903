// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {Smoke} from "../src/Smoke.sol";

contract SmokeTest is Test {
    function test_name() public {
        Smoke s = new Smoke();
        assertEq(s.name(), "s");
    }
}
