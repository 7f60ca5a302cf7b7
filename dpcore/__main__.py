"""Command line: ``python -m dpcore <command>``; each subcommand is one function under one argparse parser.

``run-plan PLAN.json --source PATH_OR_URL [--table NAME | --query SELECT] [--engine duckdb|spark]
[--memory-rows N]``: re-run a release plan saved from the dashboard on the full table (the source kind that
reads that form, :func:`dpcore.data.sources.from_command_line`: a file, a database's table or one read-only
SELECT's whole result) as a batch job (:mod:`dpcore.outofcore.run_plan`; a mechanism without
out-of-core passes reads at most N rows into memory, default ``DPCORE_JOB_MEMORY_ROWS`` or 2,000,000),
debiting the ledger of ``DPCORE_LEDGER_URL`` (or ``--ledger``) under the plan's request id and writing the
release files to ``<DPCORE_DATA_DIR>/artifacts`` (or ``--artifacts``). Errors print one line and exit with
status 2 (130 on Ctrl-C).

``adopt-dataset ID NAME [--ledger URL]``: give the budget and releases of a dataset whose id is its
table's fingerprint (ledgers written before dataset names carried budgets) the name NAME.

``ledger-history [--ledger URL] [--dataset ID]``: print every budget change (time, dataset, account, who,
why, totals before and after; oldest first) as CSV (:func:`dpcore.approvals.history_frame`).

``init-ledger [URL]``: create the ledger at URL (default ``DPCORE_LEDGER_URL`` or the data folder's SQLite
file) explicitly (:meth:`dpcore.ledger.Ledger.initialise`); on an existing ledger it changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from dpcore import config
from dpcore.errors import DPCoreError

Command = Callable[[argparse.Namespace], int]


def run_plan(args: argparse.Namespace) -> int:
    """Release the plan in ``args.plan`` on ``args.source``; print where the files are."""
    from dpcore.ledger import Ledger
    from dpcore.manifest import load_manifest
    from dpcore.outofcore.run_plan import run_plan as run

    manifest = load_manifest(args.plan)
    ledger = Ledger(args.ledger or config.ledger_url())
    try:
        release = run(
            manifest,
            args.source,
            ledger=ledger,
            artifacts_dir=args.artifacts or config.data_dir() / "artifacts",
            user=args.user or config.local_user(),
            engine=args.engine,
            table=args.table,
            query=args.query,
            request_id=args.request_id,
            memory_rows=args.memory_rows,
        )
        record = release.record
        eps_left, delta_left = ledger.remaining(record.account)
    finally:
        ledger.close()
    cost = f"eps {record.epsilon:g}" + (f", delta {record.delta:g}" if record.delta else "")
    if release.replayed:
        print(f"already released (nothing spent): request {record.request_id}, account {record.account}, "
              f"{cost} spent at {record.time[:19]}")
    else:
        print(f"released: request {record.request_id}, account {record.account}, {cost} spent")
    left = f"eps {eps_left:g}" + (f", delta {delta_left:g}" if record.delta or delta_left else "")
    print(f"budget left on the account: {left}")
    print(f"files: {record.artifact_path}")
    return 0


def _add_run_plan(commands: argparse._SubParsersAction) -> None:
    from dpcore.data.sources import SOURCES

    p = commands.add_parser("run-plan", help="re-run a saved release plan on the full table (batch job)")
    p.add_argument("plan", help="the release's manifest JSON (or its .json bundle) saved from the dashboard")
    forms = "; ".join(kind.command_form for kind in SOURCES.values())
    p.add_argument("--source", required=True, help=f"the table, one of: {forms}")
    rows = p.add_mutually_exclusive_group()
    rows.add_argument("--table", help="table name, for a source that holds tables")
    rows.add_argument("--query", help="one read-only SELECT, for a SQLAlchemy URL source")
    p.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb", help="default: duckdb")
    p.add_argument("--ledger", help="ledger URL (default: DPCORE_LEDGER_URL or the data folder's SQLite)")
    p.add_argument("--artifacts", help="folder for the release files (default: <data folder>/artifacts)")
    p.add_argument("--user", help="user recorded with the release (default: DPCORE_USER or 'local')")
    p.add_argument("--request-id", help="request id (default: the manifest's, else one from the plan)")
    p.add_argument(
        "--memory-rows",
        type=int,
        help="most rows read into memory for a mechanism without out-of-core passes (DP-Lloyd + MCMC, "
        "planar Laplace, PriLocation); default: DPCORE_JOB_MEMORY_ROWS or 2000000",
    )
    p.set_defaults(command=run_plan)


def init_ledger(args: argparse.Namespace) -> int:
    """Create (or confirm) the ledger at ``args.url``; print its instance id."""
    from dpcore.ledger import Ledger

    ledger = Ledger.initialise(args.url or config.ledger_url())
    print(f"ledger ready: instance {ledger.instance_id}, {len(ledger.budgets())} account(s)")
    ledger.close()
    return 0


def adopt_dataset(args: argparse.Namespace) -> int:
    """Give a fingerprint-keyed dataset's budget a name (:meth:`dpcore.ledger.Ledger.adopt_dataset`)."""
    from dpcore.ledger import Ledger

    ledger = Ledger(args.ledger or config.ledger_url())
    try:
        new_id = ledger.adopt_dataset(args.dataset_id, args.name)
        print(f"dataset {args.dataset_id} is now {args.name!r} (id {new_id}); its budget and releases moved")
    finally:
        ledger.close()
    return 0


def ledger_history(args: argparse.Namespace) -> int:
    """Print the budget history as CSV (cells that a spreadsheet would run as formulas are neutralised)."""
    from dpcore.approvals import history_frame
    from dpcore.ledger import Ledger
    from dpcore.safe_text import csv_bytes

    ledger = Ledger(args.ledger or config.ledger_url())
    try:
        sys.stdout.write(csv_bytes(history_frame(ledger, args.dataset)).decode("utf-8"))
    finally:
        ledger.close()
    return 0


def _add_ledger_history(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("ledger-history", help="print every budget change (who, when, why) as CSV")
    p.add_argument("--ledger", help="ledger URL (default: DPCORE_LEDGER_URL or the data folder's SQLite)")
    p.add_argument("--dataset", help="only this dataset id (as shown on the Ledger page)")
    p.set_defaults(command=ledger_history)


def _add_adopt_dataset(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "adopt-dataset", help="give a budget keyed by a table's fingerprint (older ledgers) a dataset name"
    )
    p.add_argument("dataset_id", help="the dataset id shown on the Ledger page and in the refusal")
    p.add_argument("name", help="the dataset name to release it under from now on (not already in use)")
    p.add_argument("--ledger", help="ledger URL (default: DPCORE_LEDGER_URL or the data folder's SQLite)")
    p.set_defaults(command=adopt_dataset)


def _add_init_ledger(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("init-ledger", help="create the budget ledger (the only way a ledger is created)")
    p.add_argument("url", nargs="?", help="ledger URL (default: DPCORE_LEDGER_URL or the data folder's)")
    p.set_defaults(command=init_ledger)


def parser() -> argparse.ArgumentParser:
    """The parser with every subcommand."""
    top = argparse.ArgumentParser(prog="python -m dpcore", description="dpcore command line")
    commands = top.add_subparsers(title="commands", required=True)
    _add_run_plan(commands)
    _add_adopt_dataset(commands)
    _add_init_ledger(commands)
    _add_ledger_history(commands)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command: Command = args.command
    try:
        return command(args)
    except DPCoreError as err:  # bad input, policy or ledger refusals: one line, no stack trace
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: each ledger change is one transaction, a request debited once
        print(
            "error: interrupted. The ledger records a change whole or not at all, and a release's request "
            "id is never debited twice: run the same command again to finish it.",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
