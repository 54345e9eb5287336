"""The NW-1 shaped workload as the peers run it: bare DBOS 3.4 and LangGraph with PostgresSaver.

Six model turns, six tool calls (four reads, a refund after one approval, a tag), as
``tests.devtools.bench.nw1`` runs it on Deskhand; the model and the reads are canned
answers of about the sizes Deskhand's NW-1 steps record, so what is measured is each
system's own bookkeeping. The refund is a real effect: one row committed in
``bench_peer_refund`` before the system records the step. A crash (``BENCH_PEER_CRASH=1``
for DBOS, ``crash=True`` for the graph) SIGKILLs the process right after that commit (the
crash row of ``bench --peers``).

LangGraph and its checkpointer are the ``bench`` dependency group's, never the product's.
Imported only by the bench and by ``python -m tests.devtools.bench.peer_crash``.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import signal
import threading
import time
from typing import Annotated, Any, TypedDict

import psycopg

CALLS: list[list[str]] = [
    ["get_ticket"],
    ["get_order"],
    ["search_kb"],
    ["search_kb"],
    ["issue_refund", "tag_ticket"],
    [],
]
STEPS = 12  # six model turns, six tool calls
TOOL_TEXT = json.dumps({"result": "x" * 900})  # a read's answer, about Deskhand's size
REFUND_TABLE = (
    "CREATE TABLE IF NOT EXISTS bench_peer_refund (id bigserial PRIMARY KEY,"
    " system text NOT NULL, run_id text NOT NULL, at timestamptz NOT NULL DEFAULT now())"
)
woke: dict[str, float] = {}  # run id -> when its refund began (the approval's wake), epoch s


def model_reply(turn: int) -> dict[str, Any]:
    calls = [
        {"type": "tool_use", "id": f"toolu_{turn}_{i}", "name": n, "input": {"reference": "NW-1"}}
        for i, n in enumerate(CALLS[turn])
    ]
    text = [{"type": "text", "text": "Refunded 1.00 and tagged the ticket."}] if not calls else []
    return {
        "content": calls + text,
        "stop_reason": "tool_use" if calls else "end_turn",
        "usage": {"input_tokens": 1200, "output_tokens": 80},
    }


_conn = threading.local()


def refund(conninfo: dict[str, Any], system: str, run_id: str, crash: bool) -> dict[str, Any]:
    """The effect: one committed row. Killed right after the commit when ``crash``."""
    conn = getattr(_conn, "c", None)
    if conn is None or conn.closed:
        conn = _conn.c = psycopg.connect(**conninfo, autocommit=True)
    woke.setdefault(run_id, time.time())
    conn.execute("INSERT INTO bench_peer_refund (system, run_id) VALUES (%s, %s)", [system, run_id])
    if crash:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"text": "Refunded 1.00 USD.", "ok": True}


# --- bare DBOS ------------------------------------------------------------------------------

_dbos: dict[str, Any] = {}


def register_dbos(conninfo: dict[str, Any]) -> Any:
    """The bare DBOS workflow (async, as Deskhand's run is: a parked run holds no thread);
    registered once, before DBOS launches."""
    if "wf" in _dbos:
        return _dbos["wf"]
    from dbos import DBOS

    async def model(turn: int) -> dict[str, Any]:
        return model_reply(turn)

    async def tool(name: str) -> dict[str, Any]:
        return {"text": TOOL_TEXT, "ok": True}

    async def effect(run_id: str) -> dict[str, Any]:
        # The process is told to die (not the workflow: its recovery must not die again).
        crash = os.environ.get("BENCH_PEER_CRASH") == "1"
        return await asyncio.to_thread(refund, conninfo, "dbos", run_id, crash)

    @DBOS.workflow(name="deskhand.bench.peer_nw1")
    async def peer_nw1() -> str:
        run_id = DBOS.workflow_id or ""
        for turn in range(len(CALLS)):
            reply = await DBOS.run_step_async({"name": "model"}, model, turn)
            for block in reply["content"]:
                if block["type"] != "tool_use":
                    continue
                name = block["name"]
                if name == "issue_refund":
                    await DBOS.recv_async("approval", timeout_seconds=3600)
                    await DBOS.run_step_async({"name": f"tool.{name}"}, effect, run_id)
                else:
                    await DBOS.run_step_async({"name": f"tool.{name}"}, tool, name)
        return "succeeded"

    _dbos["wf"] = peer_nw1
    return peer_nw1


def dbos_in_memory() -> None:
    """The same loop with no durability: what the workload itself costs."""
    for turn in range(len(CALLS)):
        reply = model_reply(turn)
        for block in reply["content"]:
            if block["type"] == "tool_use":
                _ = {"text": TOOL_TEXT, "ok": True}


# --- LangGraph + PostgresSaver ------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    turn: int
    pending: list[str]


def langgraph_graph(conninfo: dict[str, Any], checkpointer: Any, crash: bool = False) -> Any:
    """model → one node run per tool call (the refund behind an approval interrupt) → model."""
    from langgraph.config import get_config
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def model(state: State) -> dict[str, Any]:
        reply = model_reply(state["turn"])
        calls = [b["name"] for b in reply["content"] if b["type"] == "tool_use"]
        return {
            "messages": [{"role": "assistant", "content": reply["content"]}],
            "turn": state["turn"] + 1,
            "pending": calls,
        }

    def tool(state: State) -> dict[str, Any]:
        return {
            "messages": [{"role": "user", "content": [{"type": "tool_result", "text": TOOL_TEXT}]}],
            "pending": state["pending"][1:],
        }

    def approve(state: State) -> dict[str, Any]:
        interrupt({"tool": "issue_refund", "amount_cents": 100})
        return {}

    def effect(state: State) -> dict[str, Any]:
        thread = get_config()["configurable"]["thread_id"]
        out = refund(conninfo, "langgraph", thread, crash)
        return {
            "messages": [
                {"role": "user", "content": [{"type": "tool_result", "text": out["text"]}]}
            ],
            "pending": state["pending"][1:],
        }

    def after_model(state: State) -> str:
        return route(state) if state["pending"] else END

    def route(state: State) -> str:
        if not state["pending"]:
            return "model"
        return "approve" if state["pending"][0] == "issue_refund" else "tool"

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tool", tool)
    g.add_node("approve", approve)
    g.add_node("refund", effect)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", after_model, ["tool", "approve", END])
    g.add_conditional_edges("tool", route, ["tool", "approve", "model"])
    g.add_edge("approve", "refund")
    g.add_conditional_edges("refund", route, ["tool", "approve", "model"])
    return g.compile(checkpointer=checkpointer)


START_STATE: dict[str, Any] = {
    "messages": [{"role": "user", "content": "NW-1"}],
    "turn": 0,
    "pending": [],
}


def langgraph_until_approval(graph: Any, thread: str) -> None:
    graph.invoke(START_STATE, {"configurable": {"thread_id": thread}}, durability="sync")


def langgraph_resume(graph: Any, thread: str) -> Any:
    from langgraph.types import Command

    return graph.invoke(
        Command(resume=True), {"configurable": {"thread_id": thread}}, durability="sync"
    )


def langgraph_postgres(conninfo: dict[str, Any]) -> Any:
    """A PostgresSaver on its own autocommit connection, its tables set up."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    conn = psycopg.connect(**conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)
    saver.setup()
    return saver
