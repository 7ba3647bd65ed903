"""Mutation check of contracts/src: every guard must be load-bearing.

Each mutant removes ONE guard or accounting line from one contract: an access modifier
(`onlyRole(...)`, `onlyGuardianOrAdmin`, `whenNotPaused`, `nonReentrant`), an
`if (...) revert ...` check (signature, time, bound, state checks), or a state-writing
accounting statement. Each mutant runs in a scratch copy of the project (the working tree is
never touched) under the `mutate` profile (forge's ci settings, optimizer and linter off: three
times faster to compile), first against the mutated contract's own test files (forge then
compiles only those), then, if they all pass, against the whole suite. A mutant is *killed* when
a test fails, *invalid* when it does not compile, *equivalent* when listed in EQUIVALENT with
the reason (skipped). Survivors are guards no test exercises.

    python tools/mutate.py [--list] [--only REGEX] [--limit N] [--json OUT]

`make test-full` runs it over every mutant and fails if any survives. It prints one JSON object
(tried, killed, survived, invalid, equivalent, seconds, load average) as its last line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "contracts" / "src"
FORGE = ROOT / "node_modules" / "@foundry-rs" / "forge-linux-amd64" / "bin" / "forge"
log = logging.getLogger("mutate")

MODIFIERS = re.compile(
    r"\s(onlyRole\([A-Z_]+\)|onlyOwner\b|(?:onlyGuardianOrAdmin|whenNotPaused|nonReentrant)\b)"
)
ONE_LINE_REVERT = re.compile(r"^\s*if \(.*\) revert \w+\(.*\);\s*$")
BLOCK_REVERT_START = re.compile(r"^\s*if \(.*\) \{\s*$")
REQUIRE_LIKE = re.compile(r"^\s*revert \w+\(.*\);\s*$")
MULTILINE_IF_END = re.compile(r"^\s*\) revert \w+\(.*\);\s*$")
# state-writing statements (accounting): assignments to storage-looking targets and nonce use
ACCOUNTING = re.compile(
    r"^\s*("
    r"_\w+(\[[^\]]+\])*(\.\w+)?\s*(=|\+=|-=)\s*[^=].*;"  # _private storage
    r"|\w+\.(staked|unbonding|unbondingReadyAt|pendingSlashes|payout|operator|status|revoked)"
    r"\s*(=|\+=|-=)\s*[^=].*;"  # struct fields through storage pointers
    r"|(granted|proposalCount|equivocationSlashed\[\w+\]|delegationChosen\[[^\]]+\])\s*=\s*.*;"
    r"|l\.(organiser|startRound|node|endRound|settled|weiPerRound|paid|refunded|runId)\s*=\s*.*;"
    r"|leaseCount\s*=\s*.*;"  # ComputeLeases: a lease's fields and the count in its id
    r"|_useNonce\(\w+\);"
    r"|\+\+_\w+(\.\w+)?;"
    r")\s*$"
)


@dataclass(frozen=True)
class Mutant:
    file: str
    line: int  # 1-based
    kind: str
    original: str
    mutated: str  # the replacement text of [line, line + span)
    span: int = 1

    @property
    def name(self) -> str:
        text = " ".join(self.original.split())
        error = re.search(r"revert (\w+)", text)
        if self.kind == "check" and error:
            text = f"revert {error.group(1)}"
        return f"{self.file}:{self.line} {self.kind}: {text[:90]}"


def _in_function(lines: list[str], i: int) -> bool:
    """Whether line i lies inside a function or modifier body (not a declaration)."""
    depth = 0
    for j in range(i, -1, -1):
        text = lines[j]
        depth += text.count("}") - text.count("{")
        if depth < 0 and re.search(r"\b(function|modifier|constructor)\b", text):
            return True
        if depth < -1:
            return False
    return False


def mutants_of(path: Path) -> list[Mutant]:
    lines = path.read_text().splitlines(keepends=True)
    rel = str(path.relative_to(ROOT))
    out: list[Mutant] = []
    for i, text in enumerate(lines):
        code = text.split("//", 1)[0]
        header = r"\bfunction\b|^\s*\)\s|^\s*(external|public|internal|returns|onlyRole|onlyOwner"
        if re.search(header + r"|whenNotPaused|nonReentrant|onlyGuardianOrAdmin)", code):
            for m in MODIFIERS.finditer(code):
                out.append(
                    Mutant(rel, i + 1, "modifier", text, text.replace(" " + m.group(1), "", 1))
                )
        if ONE_LINE_REVERT.match(code):
            out.append(Mutant(rel, i + 1, "check", text, "\n"))
        elif MULTILINE_IF_END.match(code):
            start = i
            while start > 0 and not re.match(r"^\s*if \($", lines[start]):
                start -= 1
            span = i - start + 1
            out.append(Mutant(rel, start + 1, "check", "".join(lines[start : i + 1]), "\n", span))
        elif BLOCK_REVERT_START.match(code) and i + 2 < len(lines):
            if REQUIRE_LIKE.match(lines[i + 1]) and lines[i + 2].strip() == "}":
                out.append(Mutant(rel, i + 1, "check", "".join(lines[i : i + 3]), "\n", 3))
        elif ACCOUNTING.match(code) and _in_function(lines, i):
            out.append(Mutant(rel, i + 1, "accounting", text, "\n"))
    return out


def all_mutants() -> list[Mutant]:
    found: list[Mutant] = []
    for path in sorted(SRC.glob("*.sol")):
        found.extend(mutants_of(path))
    return found


# The mutation profile: forge's `ci` settings with the optimizer off (solcjs compiles ~3x faster
# without it; the tests check behaviour, not bytecode) and the linter off. The optimizer-tuned gas
# bounds (`test_gas_*`) are left out: they measure the optimized build (tests/contracts/
# test_gas_on_chain.py checks transaction gas on anvil), not a guard.
MUTATE_PROFILE = """
[profile.mutate]
optimizer = false

[profile.mutate.fuzz]
runs = 128

[profile.mutate.invariant]
runs = 16
depth = 48

[profile.mutate.lint]
lint_on_build = false

# the schemata (below) are compiled once, optimized: unoptimized, their switches push the test
# contracts (which embed the whole deployment) over the code size limit
[profile.schemata]
optimizer = true
optimizer_runs = 200

[profile.schemata.fuzz]
runs = 128

[profile.schemata.invariant]
runs = 16
depth = 48

[profile.schemata.lint]
lint_on_build = false
"""
NOT_A_GUARD_TEST = "^test_gas_"
COMPILE_FAILED = "Compiler run failed"

# Mutants that are equivalent by construction (the mutated contract behaves identically for
# every input), keyed by (file, the removed text without whitespace runs): skipped, with the reason
# reported. Each reason is argued in docs/contracts.md.
EQUIVALENT: dict[tuple[str, str], str] = {}


def _key(m: Mutant) -> tuple[str, str]:
    return (m.file, " ".join(m.original.split()))


def equivalence(m: Mutant) -> str | None:
    return EQUIVALENT.get(_key(m))


def _scratch() -> Path:
    """A copy of what forge needs (sources, tests, vectors, config), node_modules linked."""
    tmp = Path(tempfile.mkdtemp(prefix="coloco-mutate-"))
    for rel in ("contracts", "tests/vectors", "tools/solc", "foundry.toml"):
        src = ROOT / rel
        dst = tmp / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "broadcast"))
        else:
            shutil.copy2(src, dst)
    with (tmp / "foundry.toml").open("a") as config:
        config.write(MUTATE_PROFILE)
    (tmp / "node_modules").symlink_to(ROOT / "node_modules")
    (tmp / "deployments").mkdir()
    return tmp


_last_output: list[str] = [""]  # the last forge run's output tail, for a failing baseline


def _forge_test(tmp: Path, *args: str, timeout: int, profile: str = "mutate") -> str:
    """The suite's verdict: pass, fail (a test failed or hung) or invalid (no compile)."""
    env = {**os.environ, "FOUNDRY_PROFILE": profile}
    cmd = [str(FORGE), "test", "--fail-fast", "--no-match-test", NOT_A_GUARD_TEST, *args]
    try:
        proc = subprocess.run(
            cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return "fail"  # a hang is a detected change
    _last_output[0] = (proc.stdout + proc.stderr)[-3000:]
    if proc.returncode == 0:
        return "pass"
    return "invalid" if COMPILE_FAILED in proc.stdout + proc.stderr else "fail"


def _own_tests(mutant: Mutant) -> str:
    """The test files named after the mutated contract (X.t.sol, X.invariant.t.sol, ...)."""
    return f"contracts/test/{Path(mutant.file).stem}.*"


# Mutant schemata: every check and accounting mutant of a file is compiled once, each wrapped in
# `if (block.coinbase != <its switch>) { ... }`; `forge test --block-coinbase <switch>` then runs
# the suite with exactly that statement skipped, the same program as the textual removal, with
# no recompilation. The contracts never read block.coinbase otherwise (forge's default is zero:
# every switch off). A removed `onlyRole`, `onlyOwner` or `whenNotPaused` becomes a switched twin
# modifier doing the same check; `nonReentrant`, `onlyGuardianOrAdmin` and a file whose schemata
# do not compile (a `pure` function cannot read the block) are compiled one by one.
SWITCH_BASE = 0xC0C0_0000


def _switch(n: int) -> str:
    return f"0x{SWITCH_BASE + n:040x}"


# A switched modifier: the same check as the original, skipped when its switch is on. The
# helper modifiers are added to the contract (only those its mutants use).
SWITCHED_MODIFIERS = {
    "onlyRole": ("mutantOnlyRole", "bytes32 role", "_checkRole(role)"),
    "onlyOwner": ("mutantOnlyOwner", "", "_checkOwner()"),
    "whenNotPaused": ("mutantWhenNotPaused", "", "_requireNotPaused()"),
}


def _removed_modifier(m: Mutant) -> str | None:
    """The modifier a modifier mutant removes (`onlyRole(X)`, `whenNotPaused`, ...)."""
    for found in MODIFIERS.finditer(m.original):
        token = found.group(1)
        if m.original.replace(" " + token, "", 1) == m.mutated:
            return token
    return None


def _switched_modifier(token: str, n: int) -> str | None:
    name = token.split("(", 1)[0]
    if name not in SWITCHED_MODIFIERS:
        return None  # nonReentrant, onlyGuardianOrAdmin: compiled one by one
    helper = SWITCHED_MODIFIERS[name][0]
    role = token[len(name) + 1 : -1] if "(" in token else ""
    return f"{helper}({SWITCH_BASE + n:#x}{', ' + role if role else ''})"


def _schemata(path: Path, mutants: dict[int, Mutant]) -> str:
    """The file's text with each mutant's statement behind its switch (bottom-up: the line
    numbers above stay valid), and each removed modifier replaced by its switched twin."""
    lines = path.read_text().splitlines(keepends=True)
    helpers: set[str] = set()
    for n, m in sorted(mutants.items(), key=lambda item: -item[1].line):
        idx = m.line - 1
        if m.kind == "modifier":
            token = _removed_modifier(m)
            assert token is not None
            switched = _switched_modifier(token, n)
            assert switched is not None
            lines[idx] = lines[idx].replace(" " + token, " " + switched, 1)
            helpers.add(token.split("(", 1)[0])
            continue
        indent = re.match(r"\s*", lines[idx])
        pad = indent.group(0) if indent else ""
        body = lines[idx : idx + m.span]
        lines[idx : idx + m.span] = [
            f"{pad}if (block.coinbase != address(uint160({SWITCH_BASE + n:#x}))) {{\n",
            *body,
            f"{pad}}}\n",
        ]
    if helpers:
        start = next(i for i, t in enumerate(lines) if re.match(r"(abstract )?contract ", t))
        body_at = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("{"))
        defs = []
        for name in sorted(helpers):
            helper, param, check = SWITCHED_MODIFIERS[name]
            params = f"uint256 k{', ' + param if param else ''}"
            defs.append(
                f"    modifier {helper}({params}) {{\n"
                f"        if (block.coinbase != address(uint160(k))) {check};\n"
                "        _;\n    }\n"
            )
        lines[body_at + 1 : body_at + 1] = defs
    return "".join(lines)


def _schematable(mutants: list[Mutant]) -> dict[str, dict[int, Mutant]]:
    """Per file, the mutants that can be switched: check and accounting statements that do not
    overlap, and the modifiers with a switched twin; by index."""
    out: dict[str, dict[int, Mutant]] = {}
    for n, m in enumerate(mutants):
        mine = out.setdefault(m.file, {})
        if m.kind == "modifier":
            token = _removed_modifier(m)
            if token is not None and _switched_modifier(token, n) is not None:
                mine[n] = m
            continue
        statements = [o for o in mine.values() if o.kind != "modifier"]
        taken = any(o.line < m.line + m.span and m.line < o.line + o.span for o in statements)
        if not taken:
            mine[n] = m
    return out


def _install_schemata(tmp: Path, mutants: list[Mutant], timeout: int) -> dict[int, Mutant]:
    """Writes the schemata of every file that compiles with them; returns the switched mutants
    (by index). The unmutated suite must pass on them with every switch off."""
    by_file = _schematable(mutants)
    while by_file:
        for file, ms in by_file.items():
            (tmp / file).write_text(_schemata(ROOT / file, ms))
        verdict = _forge_test(tmp, timeout=timeout * 3, profile="schemata")
        if verdict == "pass":
            return {n: m for ms in by_file.values() for n, m in ms.items()}
        if verdict == "fail":
            raise SystemExit(f"the unmutated suite fails under the schemata:\n{_last_output[0]}")
        # some file's schemata do not compile: find it (one compile per file) and drop it
        for file in list(by_file):
            (tmp / file).write_text((ROOT / file).read_text())
        for file in list(by_file):
            (tmp / file).write_text(_schemata(ROOT / file, by_file[file]))
            built = subprocess.run(
                [str(FORGE), "build", "--skip", "test"],
                cwd=tmp,
                env={**os.environ, "FOUNDRY_PROFILE": "schemata"},
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            (tmp / file).write_text((ROOT / file).read_text())
            if built.returncode != 0:
                log.info("%s: schemata do not compile; its mutants compile one by one", file)
                del by_file[file]
    return {}


def run(mutants: list[Mutant], timeout: int) -> dict[str, list[Mutant]]:
    """Each mutant's fate: killed, survived or invalid. The contract's own test files run first
    (forge then compiles only them); a mutant they miss faces the whole suite before it is
    declared a survivor, so a survivor always survived every test."""
    tmp, schemata = _scratch(), _scratch()
    fates: dict[str, list[Mutant]] = {"killed": [], "survived": [], "invalid": []}
    done = 0

    def record(mutant: Mutant, verdict: str) -> None:
        nonlocal done
        done += 1
        fate = {"pass": "survived", "fail": "killed", "invalid": "invalid"}[verdict]
        fates[fate].append(mutant)
        log.info("[%d/%d] %-8s %s", done, len(mutants), fate, mutant.name)

    try:
        switched = _install_schemata(schemata, mutants, timeout)
        for n, mutant in switched.items():
            args = ("--block-coinbase", _switch(n))
            own = ("--match-path", _own_tests(mutant))
            verdict = _forge_test(schemata, *args, *own, timeout=timeout, profile="schemata")
            if verdict == "pass":
                verdict = _forge_test(schemata, *args, timeout=timeout, profile="schemata")
            record(mutant, verdict)
        textual = [m for n, m in enumerate(mutants) if n not in switched]
        if textual and _forge_test(tmp, timeout=timeout * 3) != "pass":
            raise SystemExit(f"the unmutated suite fails (mutate profile):\n{_last_output[0]}")
        for mutant in textual:
            target = tmp / mutant.file
            original = target.read_text()
            lines = original.splitlines(keepends=True)
            idx = mutant.line - 1
            lines[idx : idx + mutant.span] = [mutant.mutated]
            target.write_text("".join(lines))
            try:
                verdict = _forge_test(tmp, "--match-path", _own_tests(mutant), timeout=timeout)
                if verdict == "pass":
                    verdict = _forge_test(tmp, timeout=timeout)
            finally:
                target.write_text(original)
            record(mutant, verdict)
        return fates
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(schemata, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="list mutants, run nothing")
    parser.add_argument("--only", default="", help="only mutants whose name matches this regex")
    parser.add_argument("--limit", type=int, default=0, help="at most N mutants (spread evenly)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per forge run")
    parser.add_argument("--json", type=Path, help="also write the result JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    mutants = [m for m in all_mutants() if re.search(args.only, m.name)]
    if args.limit and len(mutants) > args.limit:
        step = len(mutants) / args.limit
        mutants = [mutants[int(i * step)] for i in range(args.limit)]
    if args.list:
        for m in mutants:
            sys.stdout.write(m.name + "\n")
        sys.stdout.write(json.dumps({"mutants": len(mutants)}) + "\n")
        return 0
    equivalent = [m for m in mutants if equivalence(m)]
    # a stopped run still restores its scratch copy's cleanup (finally blocks run on SystemExit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    fates = run([m for m in mutants if not equivalence(m)], args.timeout)
    fate_of = {m: fate for fate, ms in fates.items() for m in ms}
    result = {
        "tried": len(mutants),
        "killed": len(fates["killed"]),
        "survived": [m.name for m in fates["survived"]],
        "invalid": [m.name for m in fates["invalid"]],
        "equivalent": {m.name: equivalence(m) for m in equivalent},
        "seconds": round(time.monotonic() - started),
        "load_average": os.getloadavg(),
        "mutants": [
            asdict(m) | {"fate": fate_of.get(m, "equivalent"), "reason": equivalence(m)}
            for m in mutants
        ],
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: v for k, v in result.items() if k != "mutants"}
    sys.stdout.write(json.dumps(summary) + "\n")
    return 1 if fates["survived"] or fates["invalid"] else 0


if __name__ == "__main__":
    sys.exit(main())
