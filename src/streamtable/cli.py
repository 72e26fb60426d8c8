"""The ``streamtable`` command line.

Every option can also be given as an environment variable: ``STREAMTABLE_<COMMAND>_<OPTION>``
(e.g. ``STREAMTABLE_BROKER_START_PORT=9093``), via click's ``auto_envvar_prefix``.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import click

from streamtable.errors import StreamtableError

__all__ = ["cli", "main"]

ENV_PREFIX = "STREAMTABLE"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="streamtable", prog_name="streamtable")
def cli() -> None:
    """Streamtable: the Kafka Streams programming model on Spark Structured Streaming."""


# --------------------------------------------------------------------------- broker
@cli.group()
def broker() -> None:
    """Run a single-node Kafka broker in the background for development."""


def _fail(exc: StreamtableError) -> None:
    raise click.ClickException(str(exc)) from exc


@broker.command("start")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    show_envvar=True,
    help="Client port on 127.0.0.1 [default: last used, else 9092 if free, else any].",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_envvar=True,
    help="Data/log folder, kept between runs [default: <broker home>/data].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_envvar=True,
    help="Seconds to wait for the broker to answer.",
)
def broker_start(port: int | None, data_dir: Path | None, timeout: float) -> None:
    """Start the background broker (or report the one already running)."""
    from streamtable.broker import daemon

    try:
        info = daemon.start_background(
            port=port, data_dir=data_dir, startup_timeout=datetime.timedelta(seconds=timeout)
        )
    except StreamtableError as exc:
        _fail(exc)
        return
    verb = "already running" if info.get("already_running") else "started"
    click.echo(
        f"Kafka broker {verb}: bootstrap.servers={info['bootstrap_servers']} (pid {info['pid']})"
    )
    click.echo(f"data: {info['data_dir']}")
    click.echo(f"log:  {info['log_path']}")


@broker.command("stop")
def broker_stop() -> None:
    """Stop the background broker; its data is kept."""
    from streamtable.broker import daemon

    stopped = daemon.stop_background()
    if stopped is None:
        click.echo("no background Kafka broker is running")
    else:
        click.echo(f"stopped Kafka broker (pid {stopped['pid']}, {stopped['bootstrap_servers']})")


@broker.command("status")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the status as JSON.")
def broker_status(as_json: bool) -> None:
    """Show whether the background broker runs and answers; exit code 1 if it does not run."""
    from streamtable.broker import daemon

    info: dict[str, Any] = daemon.status()
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
    elif info["running"]:
        answers = "answers metadata requests" if info["answers"] else "does NOT answer yet"
        click.echo(
            f"running: pid {info['pid']}, bootstrap.servers={info['bootstrap_servers']}, {answers}"
        )
        click.echo(f"data: {info['data_dir']}")
        click.echo(f"log:  {info['log_path']}")
    else:
        click.echo("not running")
    if not info["running"]:
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> None:
    """Run the ``streamtable`` command line (the console-script entry point).

    Parameters
    ----------
    argv : list of str, optional
        Arguments; ``sys.argv[1:]`` if omitted.
    """
    cli.main(args=argv, prog_name="streamtable", auto_envvar_prefix=ENV_PREFIX)


if __name__ == "__main__":  # pragma: no cover
    main()
