"""Form input for the console's writes. A form that fails is a 400 and writes nothing."""

from __future__ import annotations

import re
import uuid
import zoneinfo
from typing import Any

from django import forms

from agent.models import RunStatus, StopReason
from deskhand.domain.desk.models import AutoRuns, Merchant, OrderSourceKind, Priority, TicketStatus
from deskhand.domain.desk.money import AmountRefused, format_cents, parse_amount
from deskhand.web.console import words

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
AMOUNT_PREFIX = "amount-"  # money a person types in the order's currency (deskhand.domain.desk.money.parse_amount)
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


HOUR = 3600


class MerchantSettingsForm(forms.Form):
    """The owner's settings (``approvals.merchant_settings.OWNER_FIELDS``), in people's units.

    Money is typed in dollars (``parse_amount``: no float), durations in hours; ``values``
    turns a valid form into the model's units. Each field's help says what a change does,
    to runs already going too.
    """

    timezone = forms.CharField(
        max_length=64,
        help_text="The store's time zone: the day the daily caps count, the times pages show.",
    )
    approval_ttl_hours = forms.IntegerField(
        min_value=1,
        max_value=24 * 30,
        help_text="How long a request for approval waits for a person before it expires"
        " (hours). Requests already waiting keep the expiry they were given.",
    )
    approval_sla_hours = forms.IntegerField(
        min_value=1,
        max_value=24 * 30,
        help_text="After how long a waiting approval is escalated to every owner (hours).",
    )
    run_refund_ceiling = forms.CharField(
        max_length=20,
        help_text="The most one run may refund, in dollars. A run keeps the ceiling it started"
        " with; new runs use this.",
    )
    daily_refund_ceiling = forms.CharField(
        max_length=20,
        help_text="The most the agent may refund in one day across all runs, in dollars."
        " Counted live: it holds for runs already going.",
    )
    auto_runs = forms.ChoiceField(
        choices=AutoRuns.choices,
        help_text="When a customer's message starts a run without a person.",
    )
    reply_window_hours = forms.IntegerField(
        min_value=1,
        max_value=24 * 30,
        help_text="How long a run waits for the customer's answer before it ends (hours)."
        " Runs already waiting keep their window.",
    )
    reply_reminder = forms.BooleanField(
        required=False,
        help_text="Remind the customer once, halfway through the window.",
    )
    max_customer_messages_per_day = forms.IntegerField(
        min_value=1,
        max_value=50,
        help_text="The most messages the agent sends one customer on one ticket in a day"
        " (two bots must never loop).",
    )
    ticket_prefix = forms.CharField(
        max_length=8,
        required=False,
        help_text="New tickets are numbered <prefix>-<n>; empty: the slug's first letters."
        " Tickets already numbered keep their number.",
    )

    order_source = forms.ChoiceField(
        choices=OrderSourceKind.choices,
        required=False,  # a form posted without it leaves the source as it is
        help_text="Where the agent, the ticket page and the refund ceilings read this store's"
        " orders: Deskhand's own tables (the demo), Shopify, or orders your own system pushes"
        " (PUT /api/v1/orders with a key of the 'orders' scope, or manage.py import_orders)."
        " A run keeps the source it started with, and its approvals the facts read from it;"
        " new runs read the new source.",
    )

    @classmethod
    def for_merchant(cls, merchant: Merchant) -> MerchantSettingsForm:
        return cls(
            initial={
                "timezone": merchant.timezone,
                "approval_ttl_hours": merchant.approval_ttl_seconds // HOUR,
                "approval_sla_hours": merchant.approval_sla_seconds // HOUR,
                "run_refund_ceiling": format_cents(merchant.run_refund_ceiling_cents),
                "daily_refund_ceiling": format_cents(merchant.daily_refund_ceiling_cents),
                "auto_runs": merchant.auto_runs,
                "reply_window_hours": merchant.reply_window_seconds // HOUR,
                "reply_reminder": merchant.reply_reminder,
                "max_customer_messages_per_day": merchant.max_customer_messages_per_day,
                "ticket_prefix": merchant.ticket_prefix,
                "order_source": merchant.order_source,
            }
        )

    def clean_timezone(self) -> str:
        tz = str(self.cleaned_data["timezone"]).strip()
        if tz not in zoneinfo.available_timezones():
            raise forms.ValidationError(f"{tz[:64]!r} is not a time zone (like Europe/Paris).")
        return tz

    def _money(self, field: str) -> int:
        try:
            return parse_amount(self.cleaned_data[field])
        except AmountRefused as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_run_refund_ceiling(self) -> int:
        return self._money("run_refund_ceiling")

    def clean_daily_refund_ceiling(self) -> int:
        return self._money("daily_refund_ceiling")

    def clean_ticket_prefix(self) -> str:
        prefix = str(self.cleaned_data["ticket_prefix"]).strip().upper()
        if prefix and not re.fullmatch(r"[A-Z0-9]{1,8}", prefix):
            raise forms.ValidationError("Letters and digits only, at most 8 (like NW).")
        return prefix

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        run, day = data.get("run_refund_ceiling"), data.get("daily_refund_ceiling")
        if isinstance(run, int) and isinstance(day, int) and run > day:
            self.add_error("run_refund_ceiling", "A run's ceiling cannot be above the day's.")
        ttl, sla = data.get("approval_ttl_hours"), data.get("approval_sla_hours")
        if isinstance(ttl, int) and isinstance(sla, int) and sla > ttl:
            self.add_error("approval_sla_hours", "Escalation must come before the request expires.")
        return data

    def values(self) -> dict[str, Any]:
        """The model's values, in its units (call once the form is valid)."""
        d = self.cleaned_data
        return {
            "timezone": d["timezone"],
            "approval_ttl_seconds": d["approval_ttl_hours"] * HOUR,
            "approval_sla_seconds": d["approval_sla_hours"] * HOUR,
            "run_refund_ceiling_cents": d["run_refund_ceiling"],
            "daily_refund_ceiling_cents": d["daily_refund_ceiling"],
            "auto_runs": d["auto_runs"],
            "reply_window_seconds": d["reply_window_hours"] * HOUR,
            "reply_reminder": d["reply_reminder"],
            "max_customer_messages_per_day": d["max_customer_messages_per_day"],
            "ticket_prefix": d["ticket_prefix"],
            **({"order_source": d["order_source"]} if d.get("order_source") else {}),
        }


class ShopifyConnectForm(forms.Form):
    """The store's address and its two secrets; the secrets are never rendered back."""

    shop_domain = forms.CharField(
        max_length=100,
        help_text="The store's permanent address, like your-store.myshopify.com.",
    )
    access_token = forms.CharField(
        max_length=200,
        widget=forms.PasswordInput(render_value=False),
        help_text="The custom app's Admin API access token. Write-only: shown as set, never again.",
    )
    webhook_secret = forms.CharField(
        max_length=200,
        widget=forms.PasswordInput(render_value=False),
        help_text="The app's client secret, which signs its webhooks. Write-only too.",
    )
