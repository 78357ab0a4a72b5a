"""``magnetar-admin schemas get | upload | delete`` and ``topics compact | compaction-status``: the schema registry
(``/admin/v2/schemas/{t}/{ns}/{topic}/...``) and topic compaction (``.../{topic}/compaction``), as pulsar-admin has
them."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import click

from broker.admin_cli.output import emit
from broker.admin_cli.params import TOPIC, pass_rest
from broker.admin_cli.settings import AdminCliError
from broker.admin_cli.topics import _topic_command

MAX_SCHEMA_FILE_BYTES = 4 * 1024 * 1024
COMPACTION_POLL_S = 1.0


@click.group("schemas")
def schemas():
    """Operations about schemas."""


def _schema_path(topic) -> str:
    return f"/admin/v2/schemas/{topic.tenant}/{topic.namespace}/{urllib.parse.quote(topic.local_name, safe='')}"


@schemas.command("get")
@click.argument("topic", type=TOPIC)
@click.option("-v", "--version", type=click.IntRange(0), help="This version (the latest when not given).")
@click.option("-a", "--all-version", is_flag=True, help="Every version.")
@pass_rest
def get(rest, topic, version, all_version):
    """Get the schema of a topic."""
    base = _schema_path(topic)
    if all_version:
        emit(rest.get(f"{base}/schemas"))
    else:
        emit(rest.get(f"{base}/schema" + (f"/{version}" if version is not None else "")))


@schemas.command("upload")
@click.argument("topic", type=TOPIC)
@click.option("-f", "--filename", type=click.Path(exists=True, dir_okay=False), required=True,
              help='A JSON schema definition: {"type": "AVRO", "schema": "...", "properties": {}}.')
@pass_rest
def upload(rest, topic, filename):
    """Upload a schema for a topic."""
    path = Path(filename)
    if path.stat().st_size > MAX_SCHEMA_FILE_BYTES:
        raise AdminCliError(f"{filename} is over {MAX_SCHEMA_FILE_BYTES} bytes")
    try:
        payload = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"{filename} is not JSON: {exc}", param_hint="'-f' / '--filename'") from None
    rest.post(f"{_schema_path(topic)}/schema", payload)


@schemas.command("delete")
@click.argument("topic", type=TOPIC)
@click.option("-f", "--force", is_flag=True, help="Delete even when the topic is in use.")
@pass_rest
def delete(rest, topic, force):
    """Delete every schema version of a topic."""
    rest.delete(f"{_schema_path(topic)}/schema", force=force or None)


@_topic_command("compact", "Run compaction on a topic (it runs in the background on the broker).")
def compact(rest, path):
    rest.put(f"{path}/compaction")
    topic = urllib.parse.unquote(path.removeprefix("/admin/v2/").replace("/", "://", 1))
    emit(f"Topic compaction requested for {topic}")


_STATUS_TEXT = {"NOT_RUN": "Compaction has not been run since broker startup",
                "RUNNING": "Compaction is currently running", "SUCCESS": "Compaction was a success"}


@_topic_command("compaction-status", "Get the status of the topic's last compaction run.")
@click.option("-w", "--wait-complete", is_flag=True, help="Wait while compaction is running.")
def compaction_status(rest, path, wait_complete):
    status = rest.get(f"{path}/compaction")
    while wait_complete and status.get("status") == "RUNNING":
        time.sleep(COMPACTION_POLL_S)  # the broker offers no way to wait for the run; pulsar-admin polls too
        status = rest.get(f"{path}/compaction")
    if status.get("status") == "ERROR":
        raise AdminCliError(f"Error in compaction: {status.get('lastError')}")
    emit(_STATUS_TEXT.get(status.get("status"), f"Compaction status: {status.get('status')}"))


GROUPS = (schemas,)
