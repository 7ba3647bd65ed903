"""tools/mutate.py finds every kind of guard the mutation check must remove (generation only;
running the forge suite per mutant is `make test-full`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from protocol.toolchain import REPO_ROOT

spec = importlib.util.spec_from_file_location("mutate", REPO_ROOT / "tools" / "mutate.py")
assert spec is not None and spec.loader is not None
mutate = importlib.util.module_from_spec(spec)
sys.modules["mutate"] = mutate  # dataclasses look their module up
spec.loader.exec_module(mutate)


def test_every_guard_kind_of_the_trust_contracts_is_a_mutant() -> None:
    names = [m.name for m in mutate.all_mutants()]
    expected = [
        "ContributionLedger.sol",  # onlyRole(COMMITTER_ROLE) removed
        "revert RewardAboveBudget",  # the budget cap
        "revert RootPending",  # the dispute window
        "revert StaleRoot",  # claims not older than the last
        "revert BudgetExceeded",  # total claimed <= budget
        "revert WrongKeySigner",  # proof of key possession
        "revert ProofExpired",  # its deadline
        "revert NodeFrozen",  # frozen stake
        "revert InvalidTreasury",  # treasury never a slasher
        "_useNonce(node);",  # key proof replay
        "equivocationSlashed[key] = true;",  # one slash per (node, run, round)
        "_totalClaimed = uint128(total);",  # accounting
    ]
    for fragment in expected:
        assert any(fragment in n for n in names), fragment
    kinds = {n.split(" ")[1].rstrip(":") for n in names}
    assert kinds == {"modifier", "check", "accounting"}
    modifiers = [n for n in names if " modifier: " in n]
    assert any("whenNotPaused" in n for n in modifiers)
    assert any("nonReentrant" in n for n in modifiers)
    assert any("onlyGuardianOrAdmin" in n for n in modifiers)


def test_a_mutant_removes_exactly_its_guard(tmp_path: Path) -> None:
    src = tmp_path / "contracts" / "src" / "X.sol"
    src.parent.mkdir(parents=True)
    src.write_text(
        "contract X {\n"
        "    function f(uint256 a) external onlyRole(ADMIN) whenNotPaused {\n"
        "        if (a == 0) revert Zero();\n"
        "        _total += a;\n"
        "    }\n"
        "}\n"
    )
    original_root = mutate.ROOT
    mutate.ROOT = tmp_path
    try:
        found = mutate.mutants_of(src)
    finally:
        mutate.ROOT = original_root
    kinds = sorted(m.kind for m in found)
    assert kinds == ["accounting", "check", "modifier", "modifier"]
    removed = [m.mutated for m in found if m.kind == "modifier"]
    assert "onlyRole(ADMIN)" not in removed[0] and "whenNotPaused" in removed[0]
    assert "whenNotPaused" not in removed[1] and "onlyRole(ADMIN)" in removed[1]


def test_schemata_put_each_mutant_behind_its_own_switch(tmp_path: Path) -> None:
    """The schemata keep the original program with every switch off; switch n skips exactly
    mutant n's statement or check (the same program as its textual removal)."""
    src = tmp_path / "contracts" / "src" / "X.sol"
    src.parent.mkdir(parents=True)
    src.write_text(
        "contract X is AccessControl {\n"
        "    function f(uint256 a) external onlyRole(ADMIN) whenNotPaused nonReentrant {\n"
        "        if (a == 0) revert Zero();\n"
        "        _total += a;\n"
        "    }\n"
        "}\n"
    )
    original_root = mutate.ROOT
    mutate.ROOT = tmp_path
    try:
        found = mutate.mutants_of(src)
        switched = mutate._schematable(found)["contracts/src/X.sol"]
        text = mutate._schemata(src, switched)
    finally:
        mutate.ROOT = original_root
    kinds = {found[n].kind for n in switched}
    assert kinds == {"check", "accounting", "modifier"}
    # nonReentrant has no switched twin (OZ keeps its state private): compiled one by one
    unswitched = [m for n, m in enumerate(found) if n not in switched]
    assert [m.kind for m in unswitched] == ["modifier"]
    assert "nonReentrant" in text
    for n, m in switched.items():
        switch = f"{mutate.SWITCH_BASE + n:#x}"
        assert text.count(switch) == 1, m.name
        if m.kind != "modifier":
            assert f"if (block.coinbase != address(uint160({switch}))) {{\n" in text
    assert "mutantOnlyRole(0x" in text and ", ADMIN)" in text
    assert "mutantWhenNotPaused(0x" in text
    assert "_checkRole(role)" in text and "_requireNotPaused()" in text
    assert " onlyRole(ADMIN)" not in text and " whenNotPaused " not in text
