"""A parked run, recorded on one commit and resurrected on another.

``record`` (dev tooling, on the commit whose step sequence is to be pinned)::

    .venv/bin/python -m tests.support.parked_fixture record tests/fixtures/parked/nw1_at_gate.json

seeds the demo world in a throwaway test database, starts a run of NW-1 with the
keyless scripted provider, lets the in-process DBOS executor work it until the
workflow waits in ``DBOS.recv`` on its refund approval, stops the executor and
dumps every row needed to resurrect that parked run: the workflow's rows in each
``dbos`` table, and the Django rows that hang off the run (the run, its step log,
its approval, its audit events). Foreign keys to seeded objects are stored by
natural key (merchant slug, ticket/order reference, customer and user email),
so ``load`` can remap them onto a freshly seeded world whose integer ids differ.
UUIDs (run id = workflow id, approval id) are kept: checkpoint outputs name them.

``record --mid-turn`` stops NW-1 inside ``MID_TURN_STEP`` instead. ``record --customer-wait``
parks a run in the wait for the customer (``agent.customer.wait``): it opens a new
Northwind ticket from Omar naming no order (``customer_wait_ticket``), so the keyless agent
asks which order, and records once the workflow waits in ``DBOS.recv`` on the ticket's ``customer:<ticket id>``
topic. That ticket is not seeded, so its customer, the ticket and the customer's own thread
lines are recorded under ``world`` and inserted first on load. Rows keyed by an integer (the
ticket, thread lines, the outbound email, the ledger claim, step rows) keep their recorded key
as ``$pk``; ``load`` gives each a new key and rewrites what named the old one: another recorded
row (``$recorded``) and the checkpoint outputs listed in ``KEYS_IN_OUTPUTS`` (the park's topic
and the question's line), which within one database never change.

``tests/fixtures/parked/nw1_at_gate_0.1.0.json`` was recorded on commit b64e4ff, the last of
0.1.0, before the 0.2.0 baseline retired its older paths (docs/deploys.md). To record a case
on an old commit, run this file's current version against the old code, from a throwaway
worktree, under the old release's application version, and keep only the JSON::

    git worktree add --detach /tmp/wt-old b64e4ff
    cp tests/support/parked_fixture.py /tmp/wt-old/tests/support/
    cd /tmp/wt-old && PYTHONPATH=$PWD DESKHAND_APP_VERSION=deskhand-0.1.0 \
        DESKHAND_DATA_DIR=<this checkout>/.deskhand \
        <this checkout>/.venv/bin/python -m tests.support.parked_fixture record \
        <this checkout>/tests/fixtures/parked/nw1_at_gate_0.1.0.json
    cd - && git worktree remove --force /tmp/wt-old

``PYTHONPATH`` puts the old checkout before this venv's editable install (``record`` refuses to
run code from anywhere but its own checkout); ``DESKHAND_APP_VERSION`` is needed because the
version otherwise comes from the installed package's metadata, which is this checkout's;
``DESKHAND_DATA_DIR`` shares this checkout's embedded Postgres. The fixture's ``commit`` names
the code that ran.

``load`` inserts those rows by column name (columns the current schema added
get their model default or database default; columns it dropped are ignored),
moves every recorded timestamp forward by the time since recording (so the
approval, the run's deadline and DBOS's durable-sleep wake-up are as far away
as they were when the run parked), and leaves the workflow ``PENDING`` under
the given executor id, as an old worker that died would have left it.

Over 400 lines on purpose: the writer and the reader of the fixture format live together, and
the file is copied whole into an old checkout to record there, needing nothing else new.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "parked" / "nw1_at_gate.json"
FORMAT = 1
TICKET = "NW-1"
STARTED_BY = "owner@northwind.test"

# How each seeded table is named by something that survives a re-seed.
NATURAL_KEYS: dict[str, tuple[str, ...]] = {
    "desk_merchant": ("slug",),
    "desk_ticket": ("merchant_id", "reference"),
    "desk_order": ("merchant_id", "reference"),
    "desk_customer": ("merchant_id", "email"),
    "desk_kbarticle": ("merchant_id", "slug"),
    "auth_user": ("email",),
    # The seeded policy whose rule decided an approval (the ask and the replies Northwind's
    # owner lets through): one version per merchant.
    "approvals_approvalpolicy": ("merchant_id", "version"),
}
# Rows a run refers to that a fresh world does not hold and nothing can rename (a prompt
# version's key is its own content hash): recorded whole beside the reference, inserted on load
# unless the world already has them.
INLINE_TABLES = ("agent_promptversion",)
# A recorded ``world`` row the new world already holds (by natural key) is used, not inserted:
# the seeded customer who opened the recorded ticket. A ticket is never reused (its reference is
# unique per merchant: loading onto a world that has it fails on that constraint).
REUSED_FROM_THE_WORLD = ("desk_customer",)
# DBOS keeps times as epoch milliseconds in integer columns with these names.
_DBOS_TIME_COLUMN = re.compile(r"(_at|_epoch_ms|^retention_timestamp)$")
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)$")


# --- Reading ------------------------------------------------------------------


def read(path: Path = FIXTURE) -> dict[str, Any]:
    return json.loads(path.read_text())


def step_names(fixture: dict[str, Any]) -> list[str]:
    """The recorded workflow's DBOS step function names, in function-id order."""
    rows = sorted(fixture["dbos"]["operation_outputs"], key=lambda r: r["function_id"])
    return [r["function_name"] for r in rows]


def workflow_step_names(workflow_id: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s"
            " ORDER BY function_id",
            [workflow_id],
        )
        return [r[0] for r in cur.fetchall()]


def sequence_change(recorded: list[str], fresh: list[str]) -> str | None:
    """None when ``fresh`` replays ``recorded``; otherwise a sentence saying where they part.

    A fresh run that parts from the recorded one at a ``DBOS.patch-…`` marker is guarded:
    old runs replay the old path (the patch returns False for them), new runs the new one.
    """
    if fresh == recorded:
        return None
    i = next(
        (k for k, (a, b) in enumerate(zip(recorded, fresh, strict=False)) if a != b),
        min(len(recorded), len(fresh)),
    )
    if i < len(fresh) and fresh[i].startswith("DBOS.patch-"):
        return None
    was = recorded[i] if i < len(recorded) else "(the end: the run was parked here)"
    now = fresh[i] if i < len(fresh) else "(the end: the fresh run parked earlier)"
    return (
        "the workflow's step sequence changed; guard it with DBOS.patch or ship a new "
        f"application version, see docs/deploys.md (step {i + 1}: recorded {was!r}, "
        f"now {now!r}; recorded {recorded}, now {fresh})"
    )


# --- Recording ----------------------------------------------------------------


def _table_columns(cur: Any, schema: str, table: str) -> dict[str, dict[str, Any]]:
    cur.execute(
        "SELECT column_name, data_type, is_nullable, column_default, is_identity"
        " FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
        [schema, table],
    )
    return {
        name: {
            "type": typ,
            "nullable": nullable == "YES",
            # An identity column's values come from the database, like a default.
            "default": "identity" if identity == "YES" else default,
        }
        for name, typ, nullable, default, identity in cur.fetchall()
    }


def _rows(cur: Any, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur.execute(f"SELECT row_to_json(t)::text FROM ({sql}) t", params)
    return [json.loads(r[0]) for r in cur.fetchall()]


def _natural(cur: Any, table: str, pk: Any) -> dict[str, Any]:
    cols = NATURAL_KEYS[table]
    cur.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE id = %s", [pk])
    values = cur.fetchone()
    key: dict[str, Any] = {}
    for col, value in zip(cols, values, strict=True):
        key[col] = _natural(cur, "desk_merchant", value) if col == "merchant_id" else value
    return {"$natural": table, "key": key}


def _django_tables(run_id: str) -> list[tuple[Any, str]]:
    """(model, fk column) for every model with rows that hang off the run, parents first."""
    from django.apps import apps

    from agent.models import Run

    found: list[tuple[Any, str]] = [(Run, "id")]
    for model in apps.get_models():
        for f in model._meta.concrete_fields:
            if f.is_relation and f.related_model is Run and model is not Run:
                if model._default_manager.filter(**{f.attname: run_id}).exists():
                    found.append((model, f.column))
                break
    # Parents before children among the recorded tables (an approval before what refers to it).
    recorded = {m for m, _ in found}
    ordered: list[tuple[Any, str]] = []
    while found:
        for item in found:
            deps = {
                f.related_model
                for f in item[0]._meta.concrete_fields
                if f.is_relation and f.related_model in recorded and f.related_model is not item[0]
            }
            if deps <= {m for m, _ in ordered}:
                ordered.append(item)
                found.remove(item)
                break
        else:  # pragma: no cover - a reference cycle between recorded tables
            raise RuntimeError(f"cannot order {found}")
    return ordered


def _auto_pk(model: Any) -> bool:
    return model._meta.pk.get_internal_type() in ("AutoField", "BigAutoField")


def _portable(cur: Any, model: Any, row: dict[str, Any], recorded_tables: set[str]) -> None:
    """Make one recorded row loadable into another world, in place.

    Its own integer key is kept aside as ``$pk`` (the load re-assigns it and remaps what
    names it); seeded foreign keys become natural keys, prompt versions are inlined, and a
    reference to another recorded row's integer key becomes ``$recorded`` (an outbound
    email's ledger claim, a thread line's email), resolved on load to that row's new key.
    """
    table = model._meta.db_table
    if _auto_pk(model):
        row["$pk"] = row.pop(model._meta.pk.column)
    for f in model._meta.concrete_fields:
        if not f.is_relation or row.get(f.column) is None:
            continue
        target = f.related_model._meta.db_table
        if target in NATURAL_KEYS:
            row[f.column] = _natural(cur, target, row[f.column])
        elif target in INLINE_TABLES:
            pk = f.target_field.column
            (whole,) = _rows(cur, f'SELECT * FROM "{target}" WHERE "{pk}" = %s', [row[f.column]])
            row[f.column] = {"$inline": target, "pk": pk, "row": whole}
        elif target not in recorded_tables or (
            target == table and _auto_pk(model)
        ):  # pragma: no cover - would need remapping the loader does not do
            raise RuntimeError(f"{table}.{f.column} refers to {target}: not remappable")
        elif _auto_pk(f.related_model):
            row[f.column] = {"$recorded": target, "pk": row[f.column]}


def _world_tables(ticket_id: int) -> list[tuple[Any, str, list[Any]]]:
    """(model, key column, keys) for the rows of a ticket the seed does not make, parents first:
    its customer, the ticket, and its thread's lines no run wrote (the customer's own)."""
    from deskhand.domain.desk.models import Customer, Ticket, TicketMessage

    ticket = Ticket.objects.get(pk=ticket_id)
    own_lines = TicketMessage.objects.filter(ticket_id=ticket_id, run__isnull=True)
    return [
        (Customer, "id", [ticket.customer_id]),
        (Ticket, "id", [ticket_id]),
        (TicketMessage, "id", list(own_lines.order_by("pk").values_list("pk", flat=True))),
    ]


def dump(run_id: str, *, world_ticket_id: int | None = None) -> dict[str, Any]:
    """Every row that makes up the parked run, with seeded foreign keys by natural key.

    Given ``world_ticket_id`` (a ticket the seed does not make), the rows the run stands on
    go under ``world``: its customer, the ticket and the customer's lines on its thread,
    inserted on load before the run's own rows (a customer the new world has is reused).
    """
    from django.db import connection

    with connection.cursor() as cur:
        dbos: dict[str, list[dict[str, Any]]] = {}
        cur.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'dbos'"
            " AND column_name IN ('workflow_uuid', 'destination_uuid', 'workflow_id')"
            " ORDER BY table_name"
        )
        for table, col in cur.fetchall():
            rows = _rows(cur, f'SELECT * FROM dbos."{table}" WHERE "{col}" = %s', [run_id])
            if rows:
                dbos[table] = rows
        world_tables = _world_tables(world_ticket_id) if world_ticket_id is not None else []
        recorded_tables = {m._meta.db_table for m, _ in _django_tables(run_id)}
        recorded_tables |= {m._meta.db_table for m, _, _ in world_tables}
        world: list[dict[str, Any]] = []
        for model, col, keys in world_tables:
            table = model._meta.db_table
            rows = _rows(cur, f'SELECT * FROM "{table}" WHERE "{col}" = ANY(%s) ORDER BY 1', [keys])
            for row in rows:
                _portable(cur, model, row, recorded_tables)
            world.append({"table": table, "rows": rows})
        django: list[dict[str, Any]] = []
        for model, col in _django_tables(run_id):
            table = model._meta.db_table
            rows = _rows(cur, f'SELECT * FROM "{table}" WHERE "{col}" = %s ORDER BY 1', [run_id])
            for row in rows:
                _portable(cur, model, row, recorded_tables)
            django.append({"table": table, "rows": rows})
    return {"dbos": dbos, **({"world": world} if world else {}), "django": django}


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def _in_recv(run_id: str) -> bool:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s", [run_id])
        status = cur.fetchone()
    names = workflow_step_names(run_id)
    # In DBOS.recv: its durable sleep (the wake-up time) is the last checkpoint written.
    return bool(status and status[0] == "PENDING" and names and names[-1] == "DBOS.sleep")


def is_parked(run_id: str) -> bool:
    """The run waits in ``DBOS.recv`` on its pending approval."""
    from agent.models import Run

    run = Run.objects.get(pk=run_id)
    if run.status != "awaiting_approval" or not run.approvals.filter(status="pending").exists():
        return False
    return _in_recv(run_id)


def is_waiting_for_customer(run_id: str) -> bool:
    """The run waits in ``DBOS.recv`` on its ticket's customer topic, its park checkpointed."""
    from agent.models import Run

    if Run.objects.get(pk=run_id).status != "awaiting_customer":
        return False
    return "customer.park" in workflow_step_names(run_id) and _in_recv(run_id)


#: Where ``record --mid-turn`` stops the run: inside this tool's step, after the model turn that
#: asked for it was checkpointed and before the tool's own checkpoint, as a worker killed
#: mid-turn leaves it.
MID_TURN_STEP = "tool.get_order"


#: ``record --customer-wait``: a new Northwind ticket from a customer who names no order (the
#: keyless agent asks which order it is about before anything else) — Omar, whose NW-1077 has
#: shipped, so the answer naming it lets the run finish with a reply, as in
#: tests/customer/test_waiting.py.
CUSTOMER = "omar.reyes@example.com"
CUSTOMER_SUBJECT = "Where is my order?"
CUSTOMER_BODY = "Hello, my order still has not arrived and no tracking email came. Where is it?"
CUSTOMER_MESSAGE_ID = "<omar-1@mail.example.com>"
SUPPORT_ADDRESS = "support@northwind.test"


def customer_wait_ticket() -> Any:
    """The ticket ``record --customer-wait`` parks a run on, as the thread code opens it for a
    first email. Northwind's automatic runs are off while recording: the recorder starts the
    run itself, as for NW-1, so no audit event names a thread line by a key the load changes."""
    from deskhand.domain.desk.models import Merchant
    from deskhand.domain.desk.thread import (
        customer_for_address,
        thread_customer_message_add,
        ticket_open,
    )

    Merchant.objects.filter(slug="northwind").update(auto_runs="off")
    merchant = Merchant.objects.get(slug="northwind")
    customer = customer_for_address(merchant=merchant, address=CUSTOMER)
    ticket = ticket_open(merchant=merchant, customer=customer, subject=CUSTOMER_SUBJECT)
    thread_customer_message_add(
        ticket=ticket,
        channel="email",
        body=CUSTOMER_BODY,
        subject=CUSTOMER_SUBJECT,
        from_address=CUSTOMER,
        to_address=SUPPORT_ADDRESS,
        message_id=CUSTOMER_MESSAGE_ID,
    )
    return ticket


def record(out: Path, *, mid_turn: bool = False, customer_wait: bool = False) -> dict[str, Any]:
    """Park a run on this commit's code and write the fixture to ``out``: NW-1 at its refund
    gate, or (``mid_turn``) NW-1 inside ``MID_TURN_STEP`` with the model turn before it
    checkpointed, or (``customer_wait``) a new ticket's run in the wait for the customer's
    answer to the question it asked (``customer_wait_ticket``; its ticket rows go under ``world``)."""
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    os.environ["ANTHROPIC_API_KEY"] = ""  # the keyless scripted provider, whatever the shell has
    import django

    django.setup()
    import agent

    # The code that records must be this file's checkout (a second worktree at an old commit
    # sharing a venv whose editable install points elsewhere records that other code).
    code = Path(agent.__file__).resolve().parents[1]
    if code != ROOT:
        raise RuntimeError(f"recording with the code in {code}, not {ROOT}: set PYTHONPATH={ROOT}")
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections
    from django.test.utils import setup_databases, teardown_databases

    connections["default"].settings_dict["TEST"]["NAME"] = "test_deskhand_parked_record"
    old = setup_databases(verbosity=0, interactive=False)
    try:
        import threading

        from agent.record import faults
        from agent.run.services import run_start
        from deskhand.domain.desk.models import Ticket
        from tests.durability.helpers import user
        from tests.fixtures.dbos import (
            empty_dbos_schema,
            ensure_in_process_executor,
            stop_in_process_executor,
        )

        call_command("seed", "--reset", verbosity=0)
        empty_dbos_schema()
        ticket = customer_wait_ticket() if customer_wait else Ticket.objects.get(reference=TICKET)
        reached, release = threading.Event(), threading.Event()

        def hold() -> None:
            # The step's thread waits here: no checkpoint of this step exists while it does.
            reached.set()
            release.wait(120)
            raise faults.InjectedCrash("recording stopped here")

        def there(run_id: str) -> bool:
            if mid_turn:
                return reached.is_set()
            return is_waiting_for_customer(run_id) if customer_wait else is_parked(run_id)

        if mid_turn:
            faults.install("before_step", MID_TURN_STEP, hold)
        from tests.support.waiting import until

        ensure_in_process_executor()
        try:
            run = run_start(ticket=ticket, user=user(STARTED_BY), channel="cli")
            assert run.provider == "scripted", run.provider
            run_id = str(run.id)
            until(
                f"run {run_id} to park",
                lambda: there(run_id),
                every=0.1,
                seen=lambda: workflow_step_names(run_id),
            )
            rows = dump(run_id) if mid_turn else {}
        finally:
            stop_in_process_executor()
            release.set()
            faults.clear()
        recorded_at = time.time()
        if mid_turn:
            time.sleep(1)  # the held step's thread ends (it raises) before the database goes
        else:
            rows = dump(run_id, world_ticket_id=ticket.pk if customer_wait else None)
        from importlib.metadata import version

        dirty = _git("status", "--porcelain", "--", "agent", "approvals", "deskhand")
        if mid_turn:
            where, flag = f"NW-1 stopped mid-turn inside {MID_TURN_STEP}", " --mid-turn"
        elif customer_wait:
            where = (
                f"{ticket.reference} (a new ticket from {CUSTOMER} naming no order) parked in "
                "the wait for the customer's answer to the question its run asked"
            )
            flag = " --customer-wait"
        else:
            where, flag = "NW-1 parked at its refund approval", ""
        fixture = {
            "about": (
                f"{where}, recorded by tests/support/parked_fixture.py "
                f"on commit {_git('rev-parse', '--short', 'HEAD')}"
                f"{' (with uncommitted product changes)' if dirty else ''}, application version "
                f"{settings.DESKHAND_APP_VERSION}. Re-record: .venv/bin/python -m "
                f"tests.support.parked_fixture record{flag} {out} "
                f"(see docs/deploys.md before you do)."
            ),
            "format": FORMAT,
            "commit": _git("rev-parse", "HEAD"),
            "application_version": settings.DESKHAND_APP_VERSION,
            "dbos_version": version("dbos"),
            "recorded_at": dt.datetime.fromtimestamp(recorded_at, dt.UTC).isoformat(),
            "recorded_at_epoch_ms": int(recorded_at * 1000),
            "workflow_id": run_id,
            "ticket": ticket.reference,
            "step_names": [],
            **rows,
        }
        fixture["step_names"] = step_names(fixture)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(fixture, indent=1, sort_keys=False) + "\n")
        return fixture
    finally:
        from deskhand.infra.dbos.client import close_clients

        close_clients()  # its session would keep the throwaway database from being dropped
        connections.close_all()
        teardown_databases(old, verbosity=0)


# --- Loading ------------------------------------------------------------------


def _shift_value(value: Any, delta_ms: int) -> Any:
    """Recorded ISO-8601 UTC timestamps, anywhere in a JSON value, moved on by ``delta_ms``."""
    if isinstance(value, str) and _ISO.match(value):
        moved = dt.datetime.fromisoformat(value) + dt.timedelta(milliseconds=delta_ms)
        return (
            moved.isoformat().replace("+00:00", "Z") if value.endswith("Z") else moved.isoformat()
        )
    if isinstance(value, dict):
        return {k: _shift_value(v, delta_ms) for k, v in value.items()}
    if isinstance(value, list):
        return [_shift_value(v, delta_ms) for v in value]
    return value


def _shift_checkpoint(row: dict[str, Any], delta_ms: int) -> dict[str, Any]:
    """A DBOS output column: durable-sleep wake-ups (epoch seconds) and ISO times move on."""
    text = row.get("output")
    if not text or row.get("serialization") not in (None, "portable_json"):
        return row
    value = json.loads(text)
    if row.get("function_name") == "DBOS.sleep" and isinstance(value, int | float):
        value = value + delta_ms / 1000
    else:
        value = _shift_value(value, delta_ms)
    return {**row, "output": json.dumps(value, separators=(",", ":"))}


def _resolve(cur: Any, ref: dict[str, Any]) -> Any:
    if "$inline" in ref:
        table, pk, whole = ref["$inline"], ref["pk"], ref["row"]
        cur.execute(f'SELECT 1 FROM "{table}" WHERE "{pk}" = %s', [whole[pk]])
        if cur.fetchone() is None:
            _insert(cur, "public", table, whole)
        return whole[pk]
    found = _natural_ids(cur, ref["$natural"], ref["key"])
    if len(found) != 1:
        raise LookupError(
            f"{ref['$natural']} {ref['key']}: {len(found)} rows in the seeded world, expected 1"
        )
    return found[0]


def _natural_ids(cur: Any, table: str, key: dict[str, Any]) -> list[Any]:
    where, params = [], []
    for col, value in key.items():
        where.append(f'"{col}" = %s')
        params.append(_resolve(cur, value) if isinstance(value, dict) else value)
    cur.execute(f'SELECT id FROM "{table}" WHERE {" AND ".join(where)}', params)
    return [r[0] for r in cur.fetchall()]


def _insert(
    cur: Any, schema: str, table: str, row: dict[str, Any], *, returning: str | None = None
) -> Any:
    """Insert by column name: Postgres casts each JSON value to the column's current type."""
    cols = [c for c in row if c in _table_columns(cur, schema, table)]
    qualified = f'"{schema}"."{table}"'
    names = ", ".join(f'"{c}"' for c in cols)
    cur.execute(
        f"INSERT INTO {qualified} ({names}) SELECT {names}"
        f" FROM json_populate_record(NULL::{qualified}, %s::json)"
        + (f' RETURNING "{returning}"' if returning else ""),
        [json.dumps({c: row[c] for c in cols})],
    )
    return cur.fetchone()[0] if returning else None


def _model_defaults(table: str, row: dict[str, Any], columns: dict[str, dict[str, Any]]) -> None:
    """Columns the current schema added, NOT NULL with no database default: the model's default."""
    from django.apps import apps

    model = next((m for m in apps.get_models() if m._meta.db_table == table), None)
    if model is None:
        return
    for f in model._meta.concrete_fields:
        col = columns.get(f.column)
        if f.column in row or col is None or col["nullable"] or col["default"] is not None:
            continue
        value = f.get_default()
        if isinstance(value, dt.datetime):
            value = value.isoformat()
        row[f.column] = value


def shifted(fixture: dict[str, Any], delta_ms: int) -> dict[str, Any]:
    """A copy of ``fixture`` with every recorded time moved by ``delta_ms``.

    Django timestamp columns, DBOS's epoch-millisecond columns, and the times inside
    checkpoint outputs (the approval's ``expires_at``, the loop's clock readings, the
    durable sleep's wake-up) move together, so the parked run is as far from its
    deadlines as it was when it was recorded.
    """
    from django.db import connection

    out = copy.deepcopy(fixture)
    out["recorded_at_epoch_ms"] = fixture["recorded_at_epoch_ms"] + delta_ms
    with connection.cursor() as cur:
        for block in out["django"]:
            columns = _table_columns(cur, "public", block["table"])
            for row in block["rows"]:
                for col, value in row.items():
                    if columns.get(col, {}).get("type") == "timestamp with time zone":
                        row[col] = _shift_value(value, delta_ms)
        for table, rows in out["dbos"].items():
            columns = _table_columns(cur, "dbos", table)
            for i, row in enumerate(rows):
                for col, value in row.items():
                    if (
                        value is not None
                        and _DBOS_TIME_COLUMN.search(col)
                        and columns.get(col, {}).get("type") == "bigint"
                    ):
                        row[col] = value + delta_ms
                if table == "operation_outputs":
                    rows[i] = _shift_checkpoint(row, delta_ms)
    return out


def aged(fixture: dict[str, Any], days: float) -> dict[str, Any]:
    """The fixture as if it had been recorded ``days`` earlier."""
    return shifted(fixture, -int(days * 86_400_000))


#: Checkpoint outputs that name a recorded row by its integer key: the load rewrites them to the
#: row's key in the new world. A string names it after its last colon (a topic:
#: ``deskhand.infra.dbos.names.customer_topic``). Within one database these keys never change; only
#: moving a run into another world (this loader) needs it.
KEYS_IN_OUTPUTS: dict[str, dict[str, str]] = {
    "customer.park": {"topic": "desk_ticket", "after": "desk_ticketmessage"},
}


def _rekeyed(value: Any, table: str, keys: dict[tuple[str, Any], Any]) -> Any:
    if isinstance(value, int) and (table, value) in keys:
        return keys[(table, value)]
    if isinstance(value, str) and ":" in value:
        head, _, tail = value.rpartition(":")
        if tail.isdigit() and (table, int(tail)) in keys:
            return f"{head}:{keys[(table, int(tail))]}"
    return value


def _rekey_outputs(rows: list[dict[str, Any]], keys: dict[tuple[str, Any], Any]) -> None:
    for row in rows:
        named = KEYS_IN_OUTPUTS.get(row.get("function_name", ""))
        if not named or not row.get("output") or row.get("serialization") != "portable_json":
            continue
        value = json.loads(row["output"])
        if isinstance(value, dict):
            for field, table in named.items():
                if field in value:
                    value[field] = _rekeyed(value[field], table, keys)
            row["output"] = json.dumps(value, separators=(",", ":"))


def load(fixture: dict[str, Any], *, executor_id: str) -> str:
    """Resurrect the parked run in this (freshly seeded) database; returns the workflow id.

    The ``world`` rows (a ticket the seed does not make) go in first, a customer the world
    already has reused; then the run's rows. Each recorded row's integer key (``$pk``) gets a
    new one, and what named the old key — another recorded row (``$recorded``), a checkpoint
    output (``KEYS_IN_OUTPUTS``) — names the new. The workflow is left ``PENDING`` under
    ``executor_id`` and the recorded application version: launching an executor with that id
    and version recovers it.
    """
    from django.db import connection, transaction

    data = shifted(fixture, int(time.time() * 1000) - fixture["recorded_at_epoch_ms"])
    keys: dict[tuple[str, Any], Any] = {}  # (table, recorded key) -> key in this world
    world = {id(block) for block in data.get("world", [])}
    with transaction.atomic(), connection.cursor() as cur:
        for block in [*data.get("world", []), *data["django"]]:
            table = block["table"]
            columns = _table_columns(cur, "public", table)
            for recorded in block["rows"]:
                row = {}
                for col, value in recorded.items():
                    if col == "$pk":
                        continue
                    if isinstance(value, dict) and ("$natural" in value or "$inline" in value):
                        value = _resolve(cur, value)
                    elif isinstance(value, dict) and "$recorded" in value:
                        value = keys[(value["$recorded"], value["pk"])]
                    row[col] = value
                found = (
                    _natural_ids(cur, table, {c: row[c] for c in NATURAL_KEYS[table]})
                    if id(block) in world and table in REUSED_FROM_THE_WORLD
                    else []
                )
                if found:
                    new = found[0]  # the new world has it already (a seeded customer)
                else:
                    _model_defaults(table, row, columns)
                    new = _insert(
                        cur, "public", table, row, returning="id" if "$pk" in recorded else None
                    )
                if "$pk" in recorded:
                    keys[(table, recorded["$pk"])] = new
        _rekey_outputs(data["dbos"].get("operation_outputs", []), keys)
        # The status row first: the others refer to it.
        for table in sorted(data["dbos"], key=lambda t: t != "workflow_status"):
            for row in data["dbos"][table]:
                if table == "workflow_status":
                    # As a worker that died left it: PENDING, owned by an executor that is gone.
                    row = {**row, "status": "PENDING", "executor_id": executor_id}
                    row["owner_xid"] = None
                _insert(cur, "dbos", table, row)
    return str(fixture["workflow_id"])


def main(argv: list[str]) -> int:
    flags = {a for a in argv if a.startswith("--")}
    argv = [a for a in argv if not a.startswith("--")]
    if len(argv) != 2 or argv[0] != "record" or not flags <= {"--mid-turn", "--customer-wait"}:
        print(
            "usage: python -m tests.support.parked_fixture record"
            " [--mid-turn | --customer-wait] OUT.json",
            file=sys.stderr,
        )
        return 2
    if len(flags) > 1:
        print("--mid-turn and --customer-wait park different runs: give one", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    fixture = record(
        Path(argv[1]), mid_turn="--mid-turn" in flags, customer_wait="--customer-wait" in flags
    )
    print(f"recorded run {fixture['workflow_id']}: {len(fixture['step_names'])} DBOS steps")
    print(" ".join(fixture["step_names"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
