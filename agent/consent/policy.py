"""Merchant approval policy: the routine is approved by a rule a person wrote, not by a person waiting.

A merchant's owner writes a small set of rules in the console ("refunds up to
15.00, at most 3 a day"). Each save is a new, immutable version
(``approvals.ApprovalPolicy``) and an audit event. When the run asks for an
irreversible call, ``policy_match`` (inside ``gate_request``'s transaction)
checks the newest version: a call a rule covers is approved by that rule —
recorded as an ``Approval`` with channel ``policy``, its version and rule —
and performed like any other approved call, through the ledger and under
every ceiling. So the consent invariant reads: no effect without a recorded
decision by a person, or by a versioned merchant rule a person wrote.

What a rule can never do:

* approve a tool the registry marks ``person_only`` (an email: the model's own
  words to a customer), whatever the stored rules say;
* approve what a ceiling would refuse: the refund pre-check runs before the
  policy is asked, and the refund's own transaction checks every ceiling again;
* take more than its daily count: today's policy approvals of the tool are
  counted under a lock on the merchant's row, the day on the merchant's own
  calendar, so two runs at once cannot both take the last slot.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import zoneinfo
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.tools import REGISTRY, Risk
from approvals.audit import audit_record
from approvals.models import Approval, ApprovalPolicy, ApprovalStatus, Channel
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.money import format_cents
from deskhand.domain.desk.permissions import require_owner
from deskhand.domain.desk.rows import row_by_pk
from deskhand.domain.desk.services import merchant_day_start

MAX_RULES = 10
MAX_PER_DAY = 1000
PREVIEW_DAYS = 30


class PolicyRefused(Exception):
    """The rules are not valid (or unchanged); the message says which and why, in one sentence."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule: calls of ``tool`` (up to ``max_amount_cents`` where it moves money), at most
    ``max_per_day`` a day on the merchant's calendar."""

    tool: str
    max_per_day: int
    max_amount_cents: int | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool, "max_per_day": self.max_per_day}
        if self.max_amount_cents is not None:
            out["max_amount_cents"] = self.max_amount_cents
        return out

    def text(self) -> str:
        upto = (
            f" up to {format_cents(self.max_amount_cents)}"
            if self.max_amount_cents is not None
            else ""
        )
        return f"{self.tool}{upto}, at most {self.max_per_day} a day"

    def covers(self, args: Mapping[str, Any]) -> bool:
        """The call's own arguments are within this rule (the daily count is checked apart)."""
        if self.max_amount_cents is None:
            return True
        amount = args.get(REGISTRY[self.tool].money_field)
        return (
            isinstance(amount, int)
            and not isinstance(amount, bool)
            and 1 <= amount <= self.max_amount_cents
        )


def policy_tools() -> list[str]:
    """The tools a merchant rule may cover: irreversible and not marked person-only."""
    return sorted(
        name
        for name, tool in REGISTRY.items()
        if tool.risk is Risk.IRREVERSIBLE and not tool.person_only
    )


def _whole(value: Any, what: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyRefused(f"{what} must be a whole number, not {value!r}.")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise PolicyRefused(f"{what} must be {bound}, not {value}.")
    return value


def rules_parse(raw: Any) -> list[Rule]:
    """Validated rules from their JSON (a list of objects), or ``PolicyRefused`` with a sentence."""
    if not isinstance(raw, list):
        raise PolicyRefused("the rules must be a list.")
    if len(raw) > MAX_RULES:
        raise PolicyRefused(f"a policy has at most {MAX_RULES} rules, not {len(raw)}.")
    out: list[Rule] = []
    for n, item in enumerate(raw, start=1):
        if not isinstance(item, Mapping):
            raise PolicyRefused(f"rule {n} must be an object.")
        unknown = set(item) - {"tool", "max_per_day", "max_amount_cents"}
        if unknown:
            raise PolicyRefused(f"rule {n} has unknown fields: {', '.join(sorted(unknown))}.")
        name = item.get("tool")
        tool = REGISTRY.get(name) if isinstance(name, str) else None
        if tool is None or tool.risk is not Risk.IRREVERSIBLE:
            raise PolicyRefused(
                f"rule {n}: {name!r} is not a tool that needs approval "
                f"(a rule may cover {', '.join(policy_tools())})."
            )
        if tool.person_only:
            raise PolicyRefused(
                f"rule {n}: {tool.name} always needs a person; no rule may approve it."
            )
        if any(r.tool == tool.name for r in out):
            raise PolicyRefused(f"rule {n}: there is already a rule for {tool.name}.")
        per_day = _whole(item.get("max_per_day"), f"rule {n}'s daily count", 1, MAX_PER_DAY)
        amount = item.get("max_amount_cents")
        if tool.money_field:
            if amount is None:
                raise PolicyRefused(f"rule {n}: a rule for {tool.name} needs an amount limit.")
            amount = _whole(amount, f"rule {n}'s amount limit (cents)", 1)
        elif amount is not None:
            raise PolicyRefused(f"rule {n}: {tool.name} moves no money, so it has no amount limit.")
        out.append(Rule(tool=tool.name, max_per_day=per_day, max_amount_cents=amount))
    return out


def policy_current(merchant_id: int) -> ApprovalPolicy | None:
    """The version in force: the newest."""
    return ApprovalPolicy.objects.filter(merchant_id=merchant_id).order_by("-version").first()


def policy_rules(policy: ApprovalPolicy | None) -> list[Rule]:
    """A stored version's rules (stored rules were validated when saved; re-read leniently)."""
    if policy is None:
        return []
    try:
        return rules_parse(policy.rules)
    except PolicyRefused:
        # A stored version no longer valid (a tool became person-only since): it approves nothing.
        return []


def policy_save(*, merchant: Merchant, user: Any, rules: Any, channel: str) -> ApprovalPolicy:
    """Save ``rules`` as the merchant's next version, audited as ``user``'s act (owners only)."""
    require_owner(user, merchant.pk, "change the approval policy")
    parsed = rules_parse(rules)
    with transaction.atomic():
        # The merchant's row orders versions (and is the lock policy decisions count under).
        Merchant.locked(merchant.pk)
        current = policy_current(merchant.pk)
        before = [r.as_json() for r in policy_rules(current)]
        after = [r.as_json() for r in parsed]
        if current is not None and before == after:
            raise PolicyRefused(
                f"these rules are already in force (version {current.version}); nothing was saved."
            )
        policy = ApprovalPolicy.objects.create(
            merchant=merchant,
            version=(current.version + 1) if current else 1,
            rules=after,
            created_by=user,
        )
        audit_record(
            merchant_id=merchant.pk,
            actor=user,
            action="policy.change",
            channel=channel,
            detail={
                "version": policy.version,
                "previous_version": current.version if current else None,
                "rules": after,
                "previous_rules": before,
            },
        )
    return policy


def policy_match(
    *, merchant_id: int, name: str, args: Mapping[str, Any], now: dt.datetime
) -> tuple[ApprovalPolicy, int] | None:
    """The policy version and rule (1-based) that approve this call now, or ``None``.

    Must run inside the transaction that records the approval: it locks the
    merchant's row, so today's count and the new approval are one decision.
    """
    tool = REGISTRY.get(name)
    if tool is None or tool.person_only or tool.risk is not Risk.IRREVERSIBLE:
        return None
    merchant = row_by_pk(Merchant, merchant_id, lock=True)
    policy = policy_current(merchant_id)
    for index, rule in enumerate(policy_rules(policy), start=1):
        if rule.tool != name or not rule.covers(args):
            continue
        taken = Approval.objects.filter(
            merchant_id=merchant_id,
            tool=name,
            channel=Channel.POLICY,
            status=ApprovalStatus.APPROVED,
            decided_at__gte=merchant_day_start(merchant, now=now),
        ).count()
        if taken < rule.max_per_day:
            assert policy is not None
            return policy, index
    return None


def policy_preview(
    *, merchant: Merchant, rules: list[Rule], now: dt.datetime | None = None
) -> dict[str, Any]:
    """What ``rules`` would have approved among the last 30 days of recorded approvals.

    Read-only: replays every approval requested in the window, oldest first, through
    the rules with their daily counts on the merchant's calendar. Returns the count
    and money covered, per tool, and how many of those a person had denied.
    """
    now = now or timezone.now()
    since = now - dt.timedelta(days=PREVIEW_DAYS)
    zone = zoneinfo.ZoneInfo(merchant.timezone)
    by_tool = {r.tool: r for r in rules}
    used: dict[tuple[str, dt.date], int] = defaultdict(int)
    out: dict[str, Any] = {
        "days": PREVIEW_DAYS,
        "considered": 0,
        "count": 0,
        "amount_cents": 0,
        "denied": 0,
        "tools": {},
    }
    rows = (
        Approval.objects.filter(merchant=merchant, requested_at__gte=since, requested_at__lte=now)
        .order_by("requested_at", "id")
        .values_list("tool", "arguments", "requested_at", "status")
    )
    for tool, arguments, requested_at, status in rows.iterator():
        out["considered"] += 1
        rule = by_tool.get(tool)
        args = arguments if isinstance(arguments, dict) else {}
        if rule is None or not rule.covers(args):
            continue
        day = requested_at.astimezone(zone).date()
        if used[(tool, day)] >= rule.max_per_day:
            continue
        used[(tool, day)] += 1
        money = args.get(REGISTRY[tool].money_field) if REGISTRY[tool].money_field else 0
        amount = money if isinstance(money, int) and not isinstance(money, bool) else 0
        per = out["tools"].setdefault(tool, {"count": 0, "amount_cents": 0})
        per["count"] += 1
        per["amount_cents"] += amount
        out["count"] += 1
        out["amount_cents"] += amount
        out["denied"] += status == ApprovalStatus.DENIED
    return out
