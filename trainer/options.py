"""What an operator tells a node, as one typed tree grouped by concern (``coloco node run``).

Each leaf is one flag, its type, default and help written once beside the field;
:class:`trainer.flags.TreeCommand` makes the command's flags from the tree and fills the tree from
them, and :func:`trainer.cli.build` wires a filled tree into a
:class:`~trainer.round.node.NodeRunner`::

    NodeOptions
      run_id
      identity     keystore, password_file                  the node's hot key
      endpoints    rpc_url, deployment, ledger_url           chain and ledger (none: offline)
      network      rendezvous, successor_endpoint, serve_checkpoints, host_rendezvous,
                   min_nodes, join_window, connect_timeout, collective_timeout, heartbeat_timeout
      training     device, bf16, data, model, seed, batch_size, rounds, leave_after, hold_file,
                   time_box, overlap, bounded_overlap, local_ranks
      static       inner_steps, inner_lr, wire_format        the round settings without a chain
      checkpoints  checkpoint_dir
      plain

``coloco node run`` (coloco_cli/node/run.py) reuses the groups and the leaves it shares and
brings its own for the key, the chain and ledger and the checkpoint folder; both fill this tree.
The tree holds what was typed; the checks that need more (HOST:PORT forms, the run id, a chain
without a deployment) run in :func:`trainer.cli.build`, in the order they always ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

RunId = Annotated[str, typer.Option(help="Run id: 0x + 64 hex digits, or a name.")]
PasswordFile = Annotated[
    Path | None,
    typer.Option(
        envvar="COLOCO_PASSWORD_FILE", help="Keystore password file (else $COLOCO_PASSWORD)."
    ),
]
Plain = Annotated[
    bool, typer.Option(help="No live table; log lines only (always so off a terminal).")
]


@dataclass(frozen=True)
class Identity:
    """The node's hot key: it signs every join, message and attestation."""

    keystore: Annotated[
        Path, typer.Option(envvar="COLOCO_KEYSTORE", help="Node hot key keystore JSON.")
    ]
    password_file: PasswordFile = None


@dataclass(frozen=True)
class Endpoints:
    """The chain (governed config, registry, checkpoints) and the ledger; none: offline."""

    rpc_url: Annotated[
        str | None,
        typer.Option(
            envvar="COLOCO_RPC_URL",
            help="Chain RPC; omit to train with --inner-steps etc. (offline).",
        ),
    ] = None
    deployment: Annotated[
        Path | None,
        typer.Option(envvar="COLOCO_DEPLOYMENT", help="Deployment JSON (needed with --rpc-url)."),
    ] = None
    ledger_url: Annotated[
        str | None,
        typer.Option(
            envvar="COLOCO_LEDGER_URL", help="Ledger API; omit to sign without submitting."
        ),
    ] = None


@dataclass(frozen=True)
class Network:
    """Where the node meets its peers and serves them, and how long it waits for them."""

    rendezvous: Annotated[str, typer.Option(help="HOST:PORT of the rendezvous store.")] = (
        "127.0.0.1:29400"
    )
    successor_endpoint: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT where this node hosts the rendezvous if the host dies and "
            "it is the successor (the lowest member address that set one)."
        ),
    ] = None
    serve_checkpoints: Annotated[
        str,
        typer.Option(
            help="HOST:PORT where this node serves its checkpoints to joining peers "
            "(HOST must be reachable by the other members; port 0: any free port)."
        ),
    ] = "127.0.0.1:0"
    host_rendezvous: Annotated[
        bool, typer.Option(help="Host the rendezvous store in this node.")
    ] = False
    min_nodes: Annotated[int, typer.Option(help="Nodes the first round waits for.")] = 1
    join_window: Annotated[
        float, typer.Option(help="Seconds a round boundary waits for joiners.")
    ] = 1.0
    connect_timeout: Annotated[
        float, typer.Option(help="Seconds to reach the rendezvous before giving up.")
    ] = 20.0
    collective_timeout: Annotated[
        float, typer.Option(help="Seconds before a silent peer is dropped.")
    ] = 30.0
    heartbeat_timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds without a peer's heartbeat before it is dropped from a collective "
            "or not waited for at a round boundary (0: off; keep it above the longest pause "
            "a loaded machine makes).",
        ),
    ] = 5.0


@dataclass(frozen=True)
class Training:
    """What the node trains, where, and for how many rounds."""

    device: Annotated[
        str,
        typer.Option(
            help="cpu, cuda or cuda:N. A GPU trains in pinned fp32 (no bf16, TF32 off, "
            "deterministic algorithms): what the ledger's CPU replay audits."
        ),
    ] = "cpu"
    bf16: Annotated[
        bool,
        typer.Option(
            help="On a GPU: bf16 autocast instead of pinned fp32. Faster, but the ledger's fp32 "
            "replay cannot match it: the audited rounds FAIL the audit (slashed)."
        ),
    ] = False
    data: Annotated[
        str | None,
        typer.Option(help="Folder of .txt/.jsonl/.parquet; default: the shipped stdlib snapshot."),
    ] = None
    model: Annotated[str, typer.Option(help="Model preset: tiny, small, medium, large.")] = "tiny"
    seed: Annotated[int, typer.Option(help="Genesis seed of the run.")] = 0
    batch_size: Annotated[int, typer.Option(help="Rows per inner step on this node.")] = 8
    """trainer.round.runconfig.NODE_BATCH_SIZE (tests/trainer/test_governed_defaults.py)."""
    rounds: Annotated[int | None, typer.Option(help="Stop after this round number.")] = None
    leave_after: Annotated[int | None, typer.Option(help="Leave the run after this round.")] = None
    hold_file: Annotated[
        Path | None,
        typer.Option(
            help="While this file exists, do not start a new round (keep state and heartbeats; "
            "a round number in it: hold before that round only). Remove it to go on."
        ),
    ] = None
    time_box: Annotated[
        bool,
        typer.Option(
            help="Heterogeneous nodes: run only the inner steps that fit H + 1 steps at the "
            "fastest member's pace of the round before, and declare them (paid by tokens)."
        ),
    ] = False
    overlap: Annotated[
        bool,
        typer.Option(
            help="One-round delayed outer step: round r's all-reduce runs during round r+1's "
            "compute (x1.085 in loss against lockstep); it takes precedence over the bounded "
            "overlap. A node of several local ranks or a time-boxed one runs lockstep either way."
        ),
    ] = False
    bounded_overlap: Annotated[
        bool,
        typer.Option(
            help="The bounded overlap (the default): round r's exchange runs during round "
            "r+1's first traceInterval inner steps and lands at its first boundary (x1.006 in "
            "loss against lockstep). --no-bounded-overlap (without --overlap): lockstep."
        ),
    ] = True
    local_ranks: Annotated[
        int,
        typer.Option(
            min=1,
            help="Processes of this node (CPU, one thread each): FSDP2 shards the model over "
            "them, each keeps a chunk of the outer state; what the node signs and uploads is "
            "a one-rank node's. The batch size must split over them.",
        ),
    ] = 1


@dataclass(frozen=True)
class StaticSettings:
    """The round settings of a node without a chain (with one, TrainingConfig governs them)."""

    inner_steps: Annotated[int, typer.Option(help="Offline only: H.")] = 20
    inner_lr: Annotated[float, typer.Option(help="Offline only: inner AdamW lr.")] = 3e-3
    wire_format: Annotated[str, typer.Option(help="Offline only: fp32|bf16|int8|sparse")] = "fp32"


@dataclass(frozen=True)
class Checkpoints:
    """Where the node keeps its round checkpoints (it resumes from the newest)."""

    checkpoint_dir: Annotated[Path, typer.Option(help="Where round checkpoints are written.")] = (
        Path(".coloco/checkpoints")
    )


@dataclass(frozen=True)
class NodeOptions:
    """Everything ``coloco node run`` is told, by concern."""

    run_id: RunId
    identity: Identity
    endpoints: Endpoints = field(default_factory=Endpoints)
    network: Network = field(default_factory=Network)
    training: Training = field(default_factory=Training)
    static: StaticSettings = field(default_factory=StaticSettings)
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    plain: Plain = False
