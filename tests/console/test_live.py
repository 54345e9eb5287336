"""Live from the step log: a committed step reaches an open stream fast, and a reconnect misses nothing.

A real uvicorn serves the console on the test database; the test commits
step rows with the same ``log_step`` the agent uses, and reads the
Server-Sent Events off the wire.
"""

from __future__ import annotations

import contextlib
import http.client
import queue
import socket
import threading
import time
from dataclasses import dataclass

import pytest

from agent.models import Run
from agent.record.steplog import log_step
from agent.steps import ApprovalPayload, EndPayload, ToolPayload
from tests.console.conftest import LU_OWNER, NW_OWNER, make_run, model_step, session_cookie
from tests.support.waiting import PATIENCE_S

pytestmark = pytest.mark.timeout(120)


@dataclass
class Event:
    event: str
    id: str | None
    data: str
    at: float


class SSEReader:
    """Reads one event stream in a thread; events land in a queue with their arrival time."""

    def __init__(self, server, path: str, cookie: str, last_event_id: str | None = None) -> None:
        self.events: queue.Queue[Event | None] = queue.Queue()
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        headers = {"Cookie": cookie, "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type", "")
        self.thread = threading.Thread(target=self._read, daemon=True)
        if self.status == 200:
            self.thread.start()

    def _read(self) -> None:
        fields: dict[str, list[str]] = {}
        try:
            while True:
                line = self.response.readline()
                if not line:
                    break
                text = line.decode().rstrip("\r\n")
                if text == "":
                    if "event" in fields:
                        self.events.put(
                            Event(
                                fields["event"][0],
                                (fields.get("id") or [None])[0],
                                "\n".join(fields.get("data", [])),
                                time.monotonic(),
                            )
                        )
                    fields = {}
                elif not text.startswith(":"):
                    name, _, value = text.partition(":")
                    fields.setdefault(name, []).append(
                        value[1:] if value.startswith(" ") else value
                    )
        except (OSError, AttributeError, http.client.HTTPException):  # closed under us
            pass
        self.events.put(None)

    def next(self, timeout: float = PATIENCE_S) -> Event | None:
        return self.events.get(timeout=timeout)

    def until(self, kind: str, timeout: float = PATIENCE_S) -> list[Event]:
        got: list[Event] = []
        end = time.monotonic() + timeout
        while True:
            ev = self.next(max(0.01, end - time.monotonic()))
            if ev is None:
                return got
            got.append(ev)
            if ev.event == kind:
                return got

    def close(self) -> None:
        # Shut the socket first: the reader thread is blocked in a read that holds the buffer's lock.
        if self.conn.sock is not None:
            with contextlib.suppress(OSError):
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        if self.thread.is_alive():
            self.thread.join(5)
        self.conn.close()


def step_ids(events: list[Event]) -> list[int]:
    return [int(e.id) for e in events if e.event == "step" and e.id is not None]


def test_a_committed_step_reaches_an_open_stream_in_under_a_second(web_server):
    run = make_run("NW-1")
    model_step(run, 1, text="first")
    reader = SSEReader(web_server, f"/runs/{run.pk}/stream", session_cookie(NW_OWNER))
    try:
        assert reader.status == 200 and reader.content_type.startswith("text/event-stream")
        assert step_ids(reader.until("run")) == [1]
        latencies = []
        for seq in (2, 3, 4):
            time.sleep(0.3)
            committed = time.monotonic()
            model_step(run, seq, text=f"step {seq}")  # autocommit: committed when this returns
            events = [e for e in reader.until("run") if e.event == "step"]
            assert step_ids(events) == [seq]
            latencies.append(events[0].at - committed)
            assert f"step {seq}" in events[0].data
        assert max(latencies) < 1.0, latencies
    finally:
        reader.close()


def test_a_reconnect_with_last_event_id_gets_exactly_the_missed_steps(web_server):
    run = make_run("NW-1")
    for seq in (1, 2):
        model_step(run, seq, text=f"s{seq}")
    cookie = session_cookie(NW_OWNER)
    first = SSEReader(web_server, f"/runs/{run.pk}/stream", cookie)
    assert step_ids(first.until("run")) == [1, 2]
    first.close()
    # While the tab is away, three steps commit.
    for seq in (3, 4, 5):
        model_step(run, seq, text=f"s{seq}")
    again = SSEReader(web_server, f"/runs/{run.pk}/stream", cookie, last_event_id="2")
    try:
        assert step_ids(again.until("run")) == [3, 4, 5]
        model_step(run, 6, text="s6")
        assert step_ids(again.until("run")) == [6]
    finally:
        again.close()


def test_the_stream_closes_when_the_run_is_terminal(web_server):
    run = make_run("NW-1")
    model_step(run, 1, text="working")
    reader = SSEReader(web_server, f"/runs/{run.pk}/stream", session_cookie(NW_OWNER))
    try:
        reader.until("run")
        Run.objects.filter(pk=run.pk).update(status="succeeded", stop_reason="end_turn")
        log_step(
            run_id=str(run.pk),
            seq=2,
            kind="final",
            result=EndPayload(status="succeeded", summary="all done"),
        )
        events = [e for e in reader.until("done") if e.id or e.event != "actions" or e.data]
        kinds = [e.event for e in events]
        assert kinds[-4:] == ["step", "run", "actions", "done"], (
            kinds
        )  # the forms go: nothing to steer now
        assert "Cancel run" not in events[-2].data
        assert reader.next() is None  # the server closed the stream
    finally:
        reader.close()


def test_the_actions_are_resent_only_when_a_gate_opens(web_server):
    from deskhand.domain.desk.models import Membership
    from deskhand.web.console import runpage
    from tests.console.conftest import make_approval, user

    run = make_run("NW-1")
    model_step(run, 1, text="reading")
    sig = runpage.panel_context(run, Membership.objects.get(user=user(NW_OWNER)))["actions_sig"]
    reader = SSEReader(
        web_server, f"/runs/{run.pk}/stream?after=1&actions={sig}", session_cookie(NW_OWNER)
    )
    try:
        model_step(run, 2, text="still reading")
        assert [e.event for e in reader.until("run")] == ["step", "run"]
        make_approval(run)
        log_step(
            run_id=str(run.pk),
            seq=3,
            kind="approval",
            tool="issue_refund",
            result=ApprovalPayload(event="requested"),
        )
        events = reader.until("actions")
        assert [e.event for e in events] == ["step", "run", "actions"]
        assert "Waiting for approval" in events[-1].data and 'value="approve"' in events[-1].data
        assert f'name="next" value="/runs/{run.pk}/"' in events[-1].data
    finally:
        reader.close()


def test_when_the_run_ends_its_reversible_steps_get_their_undo_button_live(web_server):
    run = make_run("NW-1")
    log_step(
        run_id=str(run.pk),
        seq=1,
        kind="tool",
        tool="set_priority",
        risk="reversible",
        result=ToolPayload(text="ok"),
        inverse={"op": "set_priority", "ticket_id": run.ticket_id, "priority": "normal"},
    )
    reader = SSEReader(web_server, f"/runs/{run.pk}/stream?after=1", session_cookie(NW_OWNER))
    try:
        Run.objects.filter(pk=run.pk).update(status="succeeded", stop_reason="end_turn")
        log_step(run_id=str(run.pk), seq=2, kind="final", result=EndPayload(status="succeeded"))
        panel = next(e for e in reader.until("done") if e.event == "run")
        assert 'id="step-1" hx-swap-oob="true"' in panel.data and "Undo this" in panel.data
    finally:
        reader.close()


def test_a_finished_run_replays_its_history_and_closes(web_server):
    run = make_run("NW-1", status="succeeded")
    for seq in (1, 2, 3):
        model_step(run, seq, text=f"s{seq}")
    reader = SSEReader(web_server, f"/runs/{run.pk}/stream?after=1", session_cookie(NW_OWNER))
    try:
        events = reader.until("done")
        assert step_ids(events) == [2, 3] and events[-1].event == "done"
    finally:
        reader.close()


def test_streams_are_scoped_to_the_merchant(web_server):
    run = make_run("NW-1")
    reader = SSEReader(web_server, f"/runs/{run.pk}/stream", session_cookie(LU_OWNER))
    assert reader.status == 404
    reader.close()
    anonymous = SSEReader(web_server, f"/runs/{run.pk}/stream", "")
    assert anonymous.status == 403
    anonymous.close()


def test_the_runs_list_stream_says_changed_for_this_merchant_only(web_server):
    nw_run = make_run("NW-1")
    lu_run = make_run("LU-1", "lumen")
    reader = SSEReader(web_server, "/runs/stream", session_cookie(NW_OWNER))
    try:
        time.sleep(0.5)  # let the listener subscribe
        model_step(lu_run, 1, text="lumen")
        with pytest.raises(queue.Empty):
            reader.next(timeout=1.5)
        committed = time.monotonic()
        model_step(nw_run, 1, text="northwind")
        event = reader.next()
        assert event is not None and event.event == "changed"
        assert event.at - committed < 1.0
    finally:
        reader.close()


def test_the_menu_counters_follow_what_waits_for_a_person(web_server):
    """Issue 29: the Attention and Approvals counters update on every page, live: an approval
    that opens (no step of this stream's own) is counted within the re-count interval."""
    from tests.console.conftest import make_approval

    run = make_run("NW-1", status="awaiting_approval")
    reader = SSEReader(web_server, "/attention/stream", session_cookie(NW_OWNER))
    try:
        first = reader.next()
        assert first is not None and first.event == "counts"
        assert 'id="count-approvals"' in first.data and 'aria-label="0 pending"' in first.data
        make_approval(run)
        event = reader.next()
        assert event is not None and event.event == "counts"
        assert (
            'aria-label="1 pending">1</span>' in event.data and 'hx-swap-oob="true"' in event.data
        )
    finally:
        reader.close()
    # Another merchant's approval never moves Lumen's counters.
    lumen = SSEReader(web_server, "/attention/stream", session_cookie(LU_OWNER))
    try:
        first = lumen.next()
        assert first is not None and 'aria-label="0 pending"' in first.data
        make_approval(make_run("NW-2", status="awaiting_approval"), order="NW-0918")
        with pytest.raises(queue.Empty):
            lumen.next(timeout=6)
    finally:
        lumen.close()
