"""Form input for the console's writes. A form that fails is a 400 and writes nothing."""

from __future__ import annotations

import re
import uuid
from typing import Any

from django import forms

from agent.models import RunStatus, StopReason
from deskhand.console import words
from deskhand.desk.models import Priority, TicketStatus
from deskhand.desk.money import AmountRefused, parse_amount

REASON_MAX = 500  # approvals.services refuses longer reasons; catch it as bad input first
NOTE_MAX = 4000


class DecideForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("deny", "Deny")])
    reason = forms.CharField(max_length=REASON_MAX, required=False, strip=True)

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        if data.get("decision") == "deny" and not data.get("reason"):
            self.add_error("reason", "Say why you are denying it; the agent reads the reason.")
        return data


CHANGE_PREFIX = "change-"
AMOUNT_PREFIX = (
    "amount-"  # money a person types in the order's currency (deskhand.desk.money.parse_amount)
)
BULK_MAX = 50


def posted_changes(data: Any) -> dict[str, str]:
    """The ``change-<field>`` inputs of an approve-with-changes form, prefix removed."""
    return {
        key[len(CHANGE_PREFIX) :]: str(value)
        for key, value in data.items()
        if key.startswith(CHANGE_PREFIX)
    }


class BulkDecideForm(forms.Form):
    """Several approvals decided together; each is posted as ``<id>:<args hash>``."""

    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("deny", "Deny")])
    reason = forms.CharField(max_length=REASON_MAX, required=False, strip=True)

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        self.picked: list[tuple[uuid.UUID, str]] = []
        raw = data.getlist("approval") if hasattr(data, "getlist") else []
        self._raw = raw
        self.nothing_picked = False

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        if not self._raw:
            self.nothing_picked = True
            raise forms.ValidationError(
                "Nothing was decided: tick at least one card below, then choose Approve selected "
                "or Deny selected."
            )
        if len(self._raw) > BULK_MAX:
            raise forms.ValidationError(f"decide at most {BULK_MAX} approvals at once.")
        for item in self._raw:
            ident, _, digest = str(item).partition(":")
            try:
                pk = uuid.UUID(ident)
            except ValueError:
                raise forms.ValidationError(f"{item[:60]!r} is not an approval.") from None
            if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
                raise forms.ValidationError(
                    f"approval {pk} was posted without the hash of the call it approves."
                )
            if any(p == pk for p, _ in self.picked):
                raise forms.ValidationError(f"approval {pk} was selected twice.")
            self.picked.append((pk, digest))
        if data.get("decision") == "deny" and not data.get("reason"):
            self.add_error("reason", "Say why you are denying them; the agent reads the reason.")
        return data


_RULE_ON = re.compile(r"^rule-(.+)-on$")


def policy_rule_refused(data: Any, tools: list[str], person_only: list[str]) -> str | None:
    """The sentence refusing a rule ticked for a tool no rule may cover, or None.

    The page offers a row per tool a rule may cover (``tools``); a posted
    ``rule-<tool>-on`` for any other tool (an email, which always needs a person, or no
    tool at all) used to be skipped, and the form answered "Saved" without it.
    """
    for key in data:
        found = _RULE_ON.match(str(key))
        if not found or not data.get(key) or found[1] in tools:
            continue
        name = found[1][:64]
        if name in person_only:
            return (
                f"No rule may approve {name}: each call of it needs a person's decision. "
                "Nothing was saved."
            )
        return (
            f"{name!r} is not a tool a rule may cover (a rule may cover "
            f"{', '.join(tools)}). Nothing was saved."
        )
    return None


def policy_rules_posted(data: Any, tools: list[str]) -> list[dict[str, Any]]:
    """The policy page's rows as rule objects: ``rule-<tool>-on`` ticked, with its limits.

    A limit left blank stays absent (the rule parser says what is missing); a limit that
    is not a whole number is refused here with a ``ValueError`` naming it.
    """
    rules: list[dict[str, Any]] = []
    for tool in tools:
        if not data.get(f"rule-{tool}-on"):
            continue
        rule: dict[str, Any] = {"tool": tool}
        typed = str(data.get(f"rule-{tool}-max_amount", "")).strip()
        if typed:  # the page's field: dollars as a person types them
            try:
                rule["max_amount_cents"] = parse_amount(typed)
            except AmountRefused as exc:
                raise ValueError(f"the {tool} amount limit: {exc}") from None
        for field in ("max_amount_cents", "max_per_day"):
            text = str(data.get(f"rule-{tool}-{field}", "")).strip()
            if not text:
                continue
            if not (text.isascii() and text.isdigit()) or len(text) > 12:
                label = "amount limit (cents)" if field == "max_amount_cents" else "daily count"
                raise ValueError(f"the {tool} {label} must be a whole number, not {text[:30]!r}")
            rule[field] = int(text)
        rules.append(rule)
    return rules


class SteerForm(forms.Form):
    body = forms.CharField(max_length=NOTE_MAX, strip=True)


def steer_refusal(form: SteerForm) -> str:
    """Why a note was not sent, in a sentence that names the limit (never a silent cut)."""
    body = str(form.data.get("body", "")).strip()
    if len(body) > NOTE_MAX:
        return (
            f"Not sent: the note is {len(body):,} characters and a note may be at most "
            f"{NOTE_MAX:,}. Shorten it (or send it in parts); nothing was cut."
        )
    if not body:
        return "Not sent: the note is empty. Write what the agent should know."
    return first_error(form)


def _optional(choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("", "any"), *choices]


class RunFilters(forms.Form):
    status = forms.ChoiceField(choices=_optional(RunStatus.choices), required=False)
    stop_reason = forms.ChoiceField(
        choices=_optional([(v, words.stop_reason(v).capitalize()) for v in StopReason.values]),
        required=False,
    )
    q = forms.CharField(max_length=100, required=False, strip=True)
    cursor = forms.CharField(max_length=200, required=False)


class SearchForm(forms.Form):
    q = forms.CharField(max_length=100, required=False, strip=True)


class TicketFilters(forms.Form):
    status = forms.ChoiceField(choices=_optional(TicketStatus.choices), required=False)
    priority = forms.ChoiceField(choices=_optional(Priority.choices), required=False)
    before = forms.IntegerField(min_value=1, required=False)


def first_error(form: forms.Form) -> str:
    for field, errors in form.errors.items():
        label = "form" if field == "__all__" else field.replace("_", " ")
        return f"{label}: {errors[0]}"
    return "the form is not valid"
