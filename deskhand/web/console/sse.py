"""Live pages from the step log: Server-Sent Events under ASGI.

There is no second channel: every step row commits with a
``pg_notify('deskhand_steps', '<run>:<seq>')`` (agent/record/steplog.py), and a stream
answers a notification by reading the table — the same rows the audit trail
shows. One process-wide LISTEN connection (per event loop) fans out to every
open stream, so an idle tab holds no database connection; a stream only
borrows one for the moment it reads. If the listener is down, or a
notification is lost, streams still tail the table every few seconds.

A run stream sends each step as ``event: step`` with ``id: <seq>``, then an
``event: run`` with the refreshed facts, an ``event: actions`` only when what
a person can do has changed (a gate opened or closed, the run ended — so a
half-typed note is not wiped by every step), and ``event: done`` when the run
is terminal, after which it closes. A browser that reconnects
sends ``Last-Event-ID`` (the last seq it saw) and gets exactly the steps after
it. The runs-list stream sends ``event: changed`` (coalesced) when any run of
the merchant writes a step. The menu's counters ride on whichever stream the page has
(``counts``), or on their own (``/attention/stream``) on a page without one.

Over 400 lines because the three streams share one listener, one framing and one way of
borrowing a database connection; they read best side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator

import psycopg
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET

from agent.models import TERMINAL_STATUSES, Run
from deskhand.domain.desk.models import Membership
from deskhand.web.console import runpage
from deskhand.web.console.attention import attention_counts
from deskhand.web.console.decorators import current_membership

log = logging.getLogger(__name__)

CHANNEL = "deskhand_steps"
TAIL_SECONDS = 3.0  # re-read the table this often even without a notification
KEEPALIVE_SECONDS = 15.0
COALESCE_SECONDS = 0.2  # the runs list refreshes at most this often
RESYNC = "*"
# Decisions, expiries and escalations write no step at once: the counters re-count anyway.
COUNTS_TAIL_SECONDS = 5.0
COUNTS_MIN_SECONDS = 1.0  # a stream carrying counters beside its steps re-counts at most this often


# --- one LISTEN per process ---------------------------------------------------------


_CONNINFO_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "options")


def _conninfo() -> str:
    sd = connections["default"].settings_dict
    params = {
        "dbname": sd["NAME"],
        "user": sd.get("USER") or None,
        "password": sd.get("PASSWORD") or None,
        "host": sd.get("HOST") or None,
        "port": str(sd["PORT"]) if sd.get("PORT") else None,
    }
    options = sd.get("OPTIONS") or {}
    params.update({k: str(options[k]) for k in _CONNINFO_OPTIONS if options.get(k) is not None})
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in params.items() if v})


class StepHub:
    """Fans ``deskhand_steps`` notifications out to the streams open in this event loop."""

    def __init__(self) -> None:
        self._subs: dict[str, set[asyncio.Queue[str]]] = {}
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()

    def subscribe(self, key: str) -> asyncio.Queue[str]:
        """``key`` is a run id, or ``"*"`` for every notification."""
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=512)
        self._subs.setdefault(key, set()).add(queue)
        if self._task is None or self._task.done():
            self.listening.clear()
            self._task = asyncio.get_running_loop().create_task(self._listen())
        return queue

    def unsubscribe(self, key: str, queue: asyncio.Queue[str]) -> None:
        subs = self._subs.get(key)
        if subs is not None:
            subs.discard(queue)
            if not subs:
                del self._subs[key]
        # The listener sees nobody is left within a second and closes its connection.

    def _put(self, key: str, payload: str) -> None:
        for queue in self._subs.get(key, ()):
            with contextlib.suppress(asyncio.QueueFull):  # a slow stream re-reads the table anyway
                queue.put_nowait(payload)

    def _dispatch(self, payload: str) -> None:
        self._put(payload.split(":", 1)[0], payload)
        self._put(RESYNC, payload)

    def _resync_all(self) -> None:
        for key in list(self._subs):
            self._put(key, RESYNC)

    async def _listen(self) -> None:
        delay, lost = 0.2, False
        while self._subs:
            try:
                async with await psycopg.AsyncConnection.connect(
                    _conninfo(), autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    if lost:  # anything may have committed while we were not listening
                        self._resync_all()
                    delay = 0.2
                    while self._subs:
                        async for note in conn.notifies(timeout=1.0):
                            self._dispatch(note.payload)
            except (psycopg.Error, OSError) as exc:
                self.listening.clear()
                lost = True
                log.warning(
                    "step listener lost its connection (%s); streams tail the table meanwhile",
                    type(exc).__name__,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        self.listening.clear()
        if self._subs:  # someone subscribed while the connection was closing
            self._task = asyncio.get_running_loop().create_task(self._listen())


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StepHub] = weakref.WeakKeyDictionary()


def hub() -> StepHub:
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = StepHub()
    return found


async def _next(queue: asyncio.Queue[str], timeout: float) -> list[str]:
    """Notifications that arrive within ``timeout`` (all that are queued once one has)."""
    try:
        first = await asyncio.wait_for(queue.get(), timeout)
    except TimeoutError:
        return []
    got = [first]
    while not queue.empty():
        got.append(queue.get_nowait())
    return got


def frame(event: str, data: str, event_id: int | None = None) -> str:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.extend(f"data: {line}" for line in (data.splitlines() or [""]))
    return "\n".join(lines) + "\n\n"


def _release_connection() -> None:
    # Streams live for minutes; never sit on a database connection between reads.
    if not connection.in_atomic_block:
        connection.close()


# --- a run's stream ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Batch:
    steps: list[tuple[int, str]]
    panel: str  # facts and history, sent with every batch of steps
    actions: str  # what a person can do, sent only when it changed
    actions_sig: str
    terminal: bool


def _read_run(
    request: HttpRequest, run_id: uuid.UUID, after: int, membership: Membership, actions_sig: str
) -> Batch:
    try:
        # The run first: if it is terminal, the final step committed with it and is visible below.
        run = Run.objects.select_related(
            "ticket", "ticket__customer", "merchant", "started_by"
        ).get(pk=run_id)
        terminal = run.status in TERMINAL_STATUSES
        ctx = runpage.steps_context(run, after=after, can_act=membership.can_act)
        steps: list[tuple[int, str]] = [
            (
                item.step.seq,
                render_to_string("console/run.html#step", {**ctx, "item": item}, request=request),
            )
            for item in ctx["items"]
        ]
        panel = actions = ""
        sig = actions_sig
        if steps or terminal:
            pctx = runpage.panel_context(run, membership)
            panel = render_to_string("console/run.html#panel", pctx, request=request)
            for item in runpage.undoable_items(run, up_to=after, can_act=membership.can_act):
                panel += render_to_string(
                    "console/run.html#step", {**ctx, "item": item, "oob": True}, request=request
                )
            if pctx["actions_sig"] != actions_sig:
                sig = pctx["actions_sig"]
                actions = render_to_string("console/run.html#actions", pctx, request=request)
        return Batch(steps, panel, actions, sig, terminal)
    finally:
        _release_connection()


async def run_events(
    request: HttpRequest,
    run_id: uuid.UUID,
    after: int,
    membership: Membership,
    actions_sig: str = "",
) -> AsyncIterator[str]:
    """Steps after ``after`` as they commit, until the run is terminal."""
    h = hub()
    queue = h.subscribe(str(run_id))
    counts = Counts(membership.merchant_id)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(h.listening.wait(), timeout=2.0)
        yield "retry: 1000\n\n"
        await counts.baseline()
        last, quiet = after, 0.0
        while True:
            batch = await sync_to_async(_read_run)(request, run_id, last, membership, actions_sig)
            if changed := await counts.changed():
                yield frame("counts", changed)
            for seq, html in batch.steps:
                yield frame("step", html, seq)
                last = seq
            if batch.panel:
                yield frame("run", batch.panel)
            if batch.actions:
                yield frame("actions", batch.actions)
                actions_sig = batch.actions_sig
            if batch.terminal:
                yield frame("done", "finished")
                return
            woke = await _next(queue, TAIL_SECONDS)
            quiet = 0.0 if woke or batch.steps else quiet + TAIL_SECONDS
            if quiet >= KEEPALIVE_SECONDS:
                yield ": keep-alive\n\n"
                quiet = 0.0
    finally:
        h.unsubscribe(str(run_id), queue)


def _parse_after(request: HttpRequest) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:  # int("²") raises; "٣" is no seq
        return None
    return int(raw)


def _stream(events: AsyncIterator[str]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response


def _scoped_run(request: HttpRequest, run_id: uuid.UUID) -> tuple[Membership | None, bool]:
    try:
        membership = current_membership(request)
        if membership is None:
            return None, False
        return membership, Run.objects.filter(
            pk=run_id, merchant_id=membership.merchant_id
        ).exists()
    finally:
        _release_connection()


@require_GET
async def run_stream(request: HttpRequest, run_id: uuid.UUID) -> HttpResponseBase:
    user = await request.auser()
    if not user.is_authenticated:
        return HttpResponse("Sign in first.", status=403, content_type="text/plain")
    after = _parse_after(request)
    if after is None:
        return HttpResponse(
            "Last-Event-ID / after must be a step number.", status=400, content_type="text/plain"
        )
    membership, visible = await sync_to_async(_scoped_run)(request, run_id)
    if membership is None or not visible:
        return HttpResponse("Not found.", status=404, content_type="text/plain")
    actions_sig = request.GET.get("actions", "")[:40]
    return _stream(run_events(request, run_id, after, membership, actions_sig))


# --- the runs list's stream ----------------------------------------------------------


def _merchant_runs(merchant_id: int, run_ids: list[str]) -> set[str]:
    try:
        return {
            str(pk)
            for pk in Run.objects.filter(pk__in=run_ids, merchant_id=merchant_id).values_list(
                "pk", flat=True
            )
        }
    finally:
        _release_connection()


async def list_events(merchant_id: int) -> AsyncIterator[str]:
    """``changed`` whenever a run of this merchant commits a step (at most every 0.2 s)."""
    h = hub()
    queue = h.subscribe(RESYNC)
    known: dict[str, bool] = {}
    counts = Counts(merchant_id)
    try:
        yield "retry: 2000\n\n"
        await counts.baseline()
        quiet = 0.0
        while True:
            payloads = await _next(queue, COUNTS_TAIL_SECONDS)
            if changed := await counts.changed():
                yield frame("counts", changed)
            if not payloads:
                quiet += COUNTS_TAIL_SECONDS
                if quiet >= KEEPALIVE_SECONDS:
                    yield ": keep-alive\n\n"
                    quiet = 0.0
                continue
            quiet = 0.0
            await asyncio.sleep(COALESCE_SECONDS)
            while not queue.empty():
                payloads.append(queue.get_nowait())
            run_ids = {p.split(":", 1)[0] for p in payloads if p != RESYNC}
            unknown = [r for r in run_ids if r not in known]
            if unknown:
                if len(known) > 10_000:
                    known.clear()
                mine = await sync_to_async(_merchant_runs)(merchant_id, unknown)
                known.update({r: r in mine for r in unknown})
            if RESYNC in payloads or any(known.get(r) for r in run_ids):
                yield frame("changed", "runs")
    finally:
        h.unsubscribe(RESYNC, queue)


def _membership(request: HttpRequest) -> Membership | None:
    try:
        return current_membership(request)
    finally:
        _release_connection()


@require_GET
async def runs_stream(request: HttpRequest) -> HttpResponseBase:
    user = await request.auser()
    if not user.is_authenticated:
        return HttpResponse("Sign in first.", status=403, content_type="text/plain")
    membership = await sync_to_async(_membership)(request)
    if membership is None:
        return HttpResponse("Not a member of any merchant.", status=403, content_type="text/plain")
    return _stream(list_events(membership.merchant_id))


# --- the navigation's counters, on every page ------------------------------------------


class Counts:
    """The navigation's counters for a stream that carries them beside its own events: the
    page was rendered with them, so only a change is sent (at most every few seconds)."""

    def __init__(self, merchant_id: int) -> None:
        self.merchant_id = merchant_id
        self.last = ""
        self.at = 0.0

    async def baseline(self) -> None:
        self.last = await sync_to_async(_counts_html)(self.merchant_id)
        self.at = time.monotonic()

    async def changed(self) -> str:
        """The counters' swap if they changed since last sent, else ""."""
        if time.monotonic() - self.at < COUNTS_MIN_SECONDS:
            return ""
        html = await sync_to_async(_counts_html)(self.merchant_id)
        self.at = time.monotonic()
        if html == self.last:
            return ""
        self.last = html
        return html


def _counts_html(merchant_id: int) -> str:
    try:
        counts = attention_counts(merchant_id=merchant_id)
        return render_to_string("console/_counts.html", {"attention": counts, "oob": True})
    finally:
        _release_connection()


async def count_events(merchant_id: int) -> AsyncIterator[str]:
    """The Attention and Approvals counters (``event: counts``, out-of-band spans) whenever
    they change: on a step of any run (coalesced) and every few seconds regardless."""
    h = hub()
    queue = h.subscribe(RESYNC)
    last = ""
    try:
        yield "retry: 2000\n\n"
        quiet = 0.0
        while True:
            html = await sync_to_async(_counts_html)(merchant_id)
            if html != last:
                yield frame("counts", html)
                last, quiet = html, 0.0
            woke = await _next(queue, COUNTS_TAIL_SECONDS)
            if woke:
                await asyncio.sleep(COALESCE_SECONDS)
                while not queue.empty():
                    queue.get_nowait()
            else:
                quiet += COUNTS_TAIL_SECONDS
                if quiet >= KEEPALIVE_SECONDS:
                    yield ": keep-alive\n\n"
                    quiet = 0.0
    finally:
        h.unsubscribe(RESYNC, queue)


@require_GET
async def counts_stream(request: HttpRequest) -> HttpResponseBase:
    user = await request.auser()
    if not user.is_authenticated:
        return HttpResponse("Sign in first.", status=403, content_type="text/plain")
    membership = await sync_to_async(_membership)(request)
    if membership is None:
        return HttpResponse("Not a member of any merchant.", status=403, content_type="text/plain")
    return _stream(count_events(membership.merchant_id))
