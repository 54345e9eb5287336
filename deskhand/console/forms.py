"""Form input for the console's writes. A form that fails is a 400 and writes nothing."""

from __future__ import annotations

from django import forms

from agent.models import RunStatus, StopReason
from deskhand.desk.models import Priority, TicketStatus

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


class SteerForm(forms.Form):
    body = forms.CharField(max_length=NOTE_MAX, strip=True)


def _optional(choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("", "any"), *choices]


class RunFilters(forms.Form):
    status = forms.ChoiceField(choices=_optional(RunStatus.choices), required=False)
    stop_reason = forms.ChoiceField(choices=_optional(StopReason.choices), required=False)
    q = forms.CharField(max_length=100, required=False, strip=True)
    cursor = forms.CharField(max_length=200, required=False)


class TicketFilters(forms.Form):
    status = forms.ChoiceField(choices=_optional(TicketStatus.choices), required=False)
    priority = forms.ChoiceField(choices=_optional(Priority.choices), required=False)
    before = forms.IntegerField(min_value=1, required=False)


def first_error(form: forms.Form) -> str:
    for field, errors in form.errors.items():
        label = "form" if field == "__all__" else field.replace("_", " ")
        return f"{label}: {errors[0]}"
    return "the form is not valid"
