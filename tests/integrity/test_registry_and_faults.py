"""Risk class comes only from the frozen registry; faults are test-only and cannot change it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.providers.base import ModelReply
from agent.record import faults
from agent.record.faults import Fault, InjectedCrash, ModelUnavailable, injecting
from agent.tools import REGISTRY, Risk, ToolError
from deskhand.infra import crashpoints

IRREVERSIBLE = {
    "issue_refund",
    "send_customer_email",
    "reply_to_customer",
    "ask_customer",
    "cancel_order",
}


def test_only_the_money_order_and_customer_mail_tools_are_irreversible() -> None:
    assert {n for n, t in REGISTRY.items() if t.risk is Risk.IRREVERSIBLE} == IRREVERSIBLE


def test_a_tools_risk_class_cannot_be_reassigned() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        REGISTRY["issue_refund"].risk = Risk.READ  # type: ignore[misc]


def test_the_registry_cannot_be_extended_or_replaced_at_run_time() -> None:
    with pytest.raises(TypeError):
        REGISTRY["issue_refund"] = REGISTRY["get_order"]  # type: ignore[index]
    with pytest.raises(TypeError):
        del REGISTRY["issue_refund"]  # type: ignore[attr-defined]


def test_a_fault_cannot_change_a_risk_class() -> None:
    with injecting(
        *(Fault("issue_refund", kind) for kind in ("error", "garbage", "hostile", "latency"))
    ):
        assert REGISTRY["issue_refund"].risk is Risk.IRREVERSIBLE
        with pytest.raises(ToolError):
            faults.before_tool("issue_refund")
    assert REGISTRY["issue_refund"].risk is Risk.IRREVERSIBLE


def test_faults_are_off_unless_a_test_turns_them_on() -> None:
    faults.clear()
    assert not faults.active()
    faults.before_tool("get_order")  # nothing happens
    assert faults.after_tool("get_order", None, "text") == "text"


def test_the_environment_cannot_switch_faults_on() -> None:
    names = (
        "DESKHAND_FAULTS",
        "DESKHAND_FAULT",
        "FAULTS",
        "FAULT_INJECTION",
        "DESKHAND_CHAOS",
        "DEBUG",
    )
    env = dict(os.environ, **dict.fromkeys(names, "issue_refund:error,model:garbage,*:kill"))
    env.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    probe = (
        "import django; django.setup(); from agent.record import faults; "
        "print(faults.active(), faults.after_tool('get_order', None, 'text'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "text"]
    assert (
        "os.environ" not in Path(faults.__file__).read_text()
        and "getenv" not in Path(faults.__file__).read_text()
    )


def test_faults_are_torn_down_when_the_block_exits_even_on_error() -> None:
    with pytest.raises(RuntimeError), injecting(Fault("get_order", "error")):
        raise RuntimeError("boom")
    assert not faults.active()


def test_times_and_after_bound_when_a_fault_fires() -> None:
    with injecting(Fault("get_order", "error", times=2, after=1)) as (fault,):
        faults.before_tool("get_order")  # let through
        for _ in range(2):
            with pytest.raises(ToolError):
                faults.before_tool("get_order")
        faults.before_tool("get_order")  # spent
    assert (fault.seen, fault.fired) == (4, 2)


def test_a_fault_can_be_scoped_to_one_run() -> None:
    with injecting(Fault("*", "error", run_id="run-a", times=None)):
        faults.before_tool("get_order", "run-b")
        with pytest.raises(ToolError):
            faults.before_tool("get_order", "run-a")


def test_an_after_fault_does_not_hide_a_before_fault() -> None:
    with injecting(Fault("get_order", "garbage"), Fault("get_order", "error", payload="down")):
        with pytest.raises(ToolError, match="down"):
            faults.before_tool("get_order")
        assert faults.after_tool("get_order", None, "real") == faults.GARBAGE


def test_hostile_text_is_appended_to_the_real_result() -> None:
    with injecting(Fault("get_order", "hostile")):
        out = faults.after_tool("get_order", None, '{"reference": "NW-1042"}')
    assert out.startswith('{"reference": "NW-1042"}') and "SYSTEM OVERRIDE" in out


def test_an_exception_fault_is_a_crash_not_a_tool_error() -> None:
    with injecting(Fault("issue_refund", "exception")), pytest.raises(InjectedCrash):
        faults.before_tool("issue_refund")


def _reply() -> ModelReply:
    return ModelReply([{"type": "text", "text": "hi"}], "end_turn", 10, 5, 100, "scripted", "m")


def test_model_faults_error_garble_and_hijack_but_keep_the_bill() -> None:
    with injecting(Fault("model", "error")), pytest.raises(ModelUnavailable):
        faults.before_model()
    with injecting(Fault("model", "garbage")):
        garbled = faults.after_model(None, _reply())
    assert garbled.stop_reason == "tool_use" and garbled.cost_micros == 100
    assert any(b.get("name") == "issue_refund!!" for b in garbled.content)
    hijack = [{"type": "tool_use", "name": "issue_refund", "input": {"order_reference": "NW-1042"}}]
    with injecting(Fault("model", "hostile", payload=hijack)):
        hijacked = faults.after_model(None, _reply())
    assert hijacked.content[0] == {"type": "text", "text": "hi"}
    assert hijacked.content[1]["name"] == "issue_refund" and hijacked.content[1]["id"].startswith(
        "toolu_"
    )


def test_a_tool_fault_does_not_touch_the_model_and_back() -> None:
    with injecting(Fault("*", "error", times=None)):
        faults.before_model()  # "*" means any tool, never the model
    with injecting(Fault("model", "error", times=None)):
        faults.before_tool("get_order")


def test_crash_points_run_their_action_at_the_named_place() -> None:
    hits = []
    faults.install("before_tool", "get_order", lambda: hits.append("before_tool"))
    try:
        faults.before_tool("get_order")
        faults.before_tool("search_kb")
        faults.at("after_step", "model")
    finally:
        faults.clear()
    assert hits == ["before_tool"]


def test_kill_at_counts_to_the_nth_visit(monkeypatch: pytest.MonkeyPatch) -> None:
    killed = []
    # The crash points live at the bottom of the layers (deskhand.infra.crashpoints); faults
    # re-exports them, so the kill is patched where it happens.
    monkeypatch.setattr(crashpoints, "sigkill_self", lambda: killed.append(os.getpid()))
    faults.kill_at("after_step", "model", nth=3)
    try:
        for _ in range(5):
            faults.at("after_step", "model")
    finally:
        faults.clear()
    assert len(killed) == 1
