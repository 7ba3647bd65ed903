"""Every `--option` the CLI's messages suggest is a real option of the command it names.

A wrong hint cannot ship again (`rewards claim` once said "pass --wait", which never existed;
`--wait-final` does). Every string literal in coloco_cli/ (errors, hints, help, docstrings) is
read with `ast`; each `coloco GROUP VERB ... --flag` in it must name a command of the real Typer
tree (Click introspection) that has `--flag`, and a bare `--flag` in a package's strings must be
an option of some command of that package's group (of any command for top-level modules).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from typer.main import get_command

from coloco_cli.main import app

ROOT = Path(__file__).resolve().parents[2] / "coloco_cli"
# modules below the CLI whose messages reach its user as they are (and name its flags)
BELOW = [ROOT.parent / "protocol" / "keys.py"]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# a `coloco ...` command line, up to the end of its clause
COMMAND_LINE = re.compile(r"coloco((?:\s+[a-z][a-z0-9-]*)+)([^`;&\n)]*)")
# other programs' options named in prose (anvil's accounts file)
OTHER_PROGRAMS_OPTIONS = {"--config-out"}
# a span in backticks that runs some other program (`forge build --offline`): not ours
OTHER_PROGRAM = re.compile(r"`(?!coloco\b)[a-z][\w.-]*(?: [^`]*)?`")


def _options(cmd: Any) -> set[str]:
    names = [o for p in cmd.params for attr in ("opts", "secondary_opts")
             for o in getattr(p, attr, [])]  # fmt: skip
    return {o for o in names if o.startswith("--")}


def command_tree() -> dict[tuple[str, ...], set[str]]:
    """Each command's path (`("fund", "claim")`) -> its long options, from the real tree."""
    out: dict[tuple[str, ...], set[str]] = {}

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        out[path] = _options(cmd)
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, (*path, name))

    walk(get_command(app), ())
    return out


def _text(node: ast.AST) -> str | None:
    """A string literal's text (an f-string's holes as `X`), or None."""
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _declares_option(node: ast.AST) -> bool:
    """`typer.Option("--tx-timeout", ...)`: a declaration, not a suggestion."""
    return isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("Option", "Argument")


def _strings(path: Path) -> list[tuple[int, str]]:
    """Every string literal of a module, with its line; a command line written as a list
    (`["coloco", "fund", "open", run, "--end-in", "600"]`) is one string."""
    out = []
    inside: set[int] = set()  # an f-string's parts, a command list's items: read with their whole
    for node in ast.walk(ast.parse(path.read_text())):
        if _declares_option(node):
            inside |= {id(a) for a in getattr(node, "args", [])}
        if id(node) in inside:
            continue
        if isinstance(node, ast.List | ast.Tuple) and node.elts and _text(node.elts[0]) == "coloco":
            out.append((node.lineno, " ".join(_text(e) or "X" for e in node.elts)))
            inside |= {id(n) for e in node.elts for n in ast.walk(e)}
            continue
        text = _text(node)
        if text is not None:
            out.append((node.lineno, text))
            inside |= {id(n) for n in ast.walk(node)}
    return out


def wrong_suggestions(
    text: str, group: str | None, tree: dict[tuple[str, ...], set[str]]
) -> list[str]:
    """What in `text` suggests a command or an option that does not exist. A bare `--flag` must
    be an option of a command of `group` (any group if None), of a command the text names, or
    a sender option every transaction takes (`--account`)."""
    problems = []
    text = OTHER_PROGRAM.sub("", text)
    rest = text
    named: set[str] = set()
    for m in COMMAND_LINE.finditer(text):
        words = m.group(1).split()
        if (words[0],) not in tree:  # prose ("try coloco out"), unless it is quoted as a command
            if text[max(m.start() - 1, 0)] == "`":
                problems.append(f"`coloco {words[0]}` is no command")
            continue
        path = max((tuple(words[:n]) for n in range(1, len(words) + 1)
                    if tuple(words[:n]) in tree), key=len)  # fmt: skip
        flags = FLAG.findall(m.group(2))
        problems += [f"`coloco {' '.join(path)}` has no {f}" for f in flags if f not in tree[path]]
        named |= tree[path]
        rest = rest.replace(m.group(0), "")
    scope = [opts for path, opts in tree.items() if group is None or path[:1] == (group,)]
    senders = [opts for opts in tree.values() if "--private-key" in opts]
    sender_options = set.intersection(*senders)  # what every transaction takes: --account, ...
    known = set().union(*scope) | named | sender_options | OTHER_PROGRAMS_OPTIONS
    problems += [f"no command of `coloco {group or ''}` has {f}" for f in FLAG.findall(rest)
                 if f not in known]  # fmt: skip
    return problems


def test_every_suggested_option_exists() -> None:
    tree = command_tree()
    groups = {path[0] for path in tree if path}
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        part = path.relative_to(ROOT).parts[0]
        # the demo is a client of every command (coloco_cli/demo prints each step's command line)
        group = part if part in groups and part != "demo" else None
        for line, text in _strings(path):
            found += [f"{path.relative_to(ROOT.parent)}:{line}: {p}"
                      for p in wrong_suggestions(text, group, tree)]  # fmt: skip
    for path in BELOW:
        for line, text in _strings(path):
            found += [f"{path.relative_to(ROOT.parent)}:{line}: {p}"
                      for p in wrong_suggestions(text, None, tree)]  # fmt: skip
    assert not found, "\n".join(found)


def test_the_check_catches_a_wrong_hint() -> None:
    """The check itself: the hint that shipped (`--wait` on rewards claim) and a wrong command
    are caught; the right ones pass."""
    tree = command_tree()
    assert wrong_suggestions("run `coloco rewards claim` again then, or pass --wait", "rewards",
                             tree)  # fmt: skip
    assert not wrong_suggestions("run `coloco rewards claim` again, or pass --wait-final",
                                 "rewards", tree)  # fmt: skip
    assert wrong_suggestions("see `coloco fund claim RUN --wait`", None, tree)
    assert not wrong_suggestions("see `coloco fund claim RUN --wait-final --no-eth`", None, tree)
    assert wrong_suggestions("try `coloco funds status`", None, tree)
    assert not wrong_suggestions("`forge build --offline` first", "fund", tree)
