"""Real processes forked from a server that has imported torch and the node once.

Spawning a process imports torch, the trainer and the Ethereum stack again: about 2.7 s of CPU a
node, paid by every node a benchmark or a distributed test starts. Python's ``forkserver`` start
method imports them once, in one server process per parent, and forks each new process from it:
the child starts with its imports done and nothing else shared (the server has run no torch op,
so no thread pool or process group crosses the fork). :func:`context` is where bench and the
tests get a multiprocessing context from; each caller names the modules its targets import, and
the server preloads all that were named before it started (named later, a module is imported by
each child, as spawn would).

A forked child inherits the server's environment, not the caller's: :func:`process` hands the
caller's current environment to the child before its target runs, as spawn would.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from multiprocessing.context import ForkServerContext
from typing import Any

_PRELOAD = {"torch", "torch.distributed", "protocol.chain", "trainer.round.node"}


def context(*preload: str) -> ForkServerContext:
    """The forkserver context; `preload` adds modules for its server to import when it starts."""
    _PRELOAD.update(preload)
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(sorted(_PRELOAD))
    return ctx


def process(
    target: Callable[..., Any],
    args: tuple[Any, ...] = (),
    *,
    name: str | None = None,
    daemon: bool | None = None,
) -> Any:
    """A process of :func:`context` that runs `target(*args)` in the caller's environment."""
    return context().Process(
        target=_in_env, args=(dict(os.environ), target, args), name=name, daemon=daemon
    )


def _in_env(env: dict[str, str], target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.environ.clear()
    os.environ.update(env)
    target(*args)
