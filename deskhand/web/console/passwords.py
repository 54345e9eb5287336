"""Password change and reset, for everyone who signs in: Django's own views and tokens.

Django's ``PasswordResetTokenGenerator`` makes the reset link (an HMAC over the account's
state: it stops working once the password changes or the user signs in, and after
``PASSWORD_RESET_TIMEOUT``). The one change: the mail goes through the notifications outbox,
as every mail to staff does (written in the request, sent by the worker, at least once), with
the link kept only until it is sent. An address with no account gets the same answer and no
mail (no one learns who has an account), and one account gets at most ``RESETS_PER_HOUR``
reset mails an hour.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.views import (
    PasswordChangeDoneView,
    PasswordChangeView,
    PasswordResetCompleteView,
    PasswordResetConfirmView,
    PasswordResetDoneView,
    PasswordResetView,
)
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.views.decorators.http import require_http_methods, require_safe

from approvals.notification_models import Notification, NotificationEvent, Transport
from approvals.notifications import console_url

RESETS_PER_HOUR = 3
FORMS = require_http_methods(["GET", "HEAD", "POST"])


class OutboxPasswordResetForm(PasswordResetForm):
    def save(self, *args: Any, **kwargs: Any) -> None:
        """Write one outbox row per matching active account (Django's lookup), nothing else."""
        for user in self.get_users(self.cleaned_data["email"]):
            since = timezone.now() - dt.timedelta(hours=1)
            recent = Notification.objects.filter(
                account=user, event=NotificationEvent.PASSWORD_RESET, created_at__gte=since
            ).count()
            if recent >= RESETS_PER_HOUR:
                continue
            path = reverse(
                "password_reset_confirm",
                kwargs={
                    "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
                    "token": default_token_generator.make_token(user),
                },
            )
            Notification.objects.create(
                account=user,
                event=NotificationEvent.PASSWORD_RESET,
                transport=Transport.EMAIL,
                recipient=user.email,
                subject="Reset your Deskhand password",
                body=(
                    "Someone (we hope you) asked to reset the password of this Deskhand"
                    " account. Open this link to choose a new one; it works once, for a"
                    " few days:\n\n{secret}\n\nIf it was not you, ignore this message: your"
                    " password stays as it is.\n"
                ),
                payload={"secret": console_url(path)},
                next_attempt_at=timezone.now(),
            )


password_reset = FORMS(
    PasswordResetView.as_view(
        form_class=OutboxPasswordResetForm,
        template_name="registration/password_reset.html",
        success_url=reverse_lazy("password_reset_done"),
    )
)
password_reset_done = require_safe(
    PasswordResetDoneView.as_view(
        template_name="registration/password_message.html",
        extra_context={
            "message": "If an account has that address, a link to reset its password"
            " is on its way. It works once."
        },
    )
)
password_reset_confirm = FORMS(
    PasswordResetConfirmView.as_view(
        template_name="registration/password_set.html",
        success_url=reverse_lazy("password_reset_complete"),
    )
)
password_reset_complete = require_safe(
    PasswordResetCompleteView.as_view(
        template_name="registration/password_message.html",
        extra_context={"message": "Your password is set: sign in with it."},
    )
)
password_change = FORMS(
    PasswordChangeView.as_view(
        template_name="registration/password_set.html",
        success_url=reverse_lazy("password_change_done"),
    )
)
password_change_done = require_safe(
    PasswordChangeDoneView.as_view(
        template_name="registration/password_message.html",
        extra_context={"message": "Your password is changed."},
    )
)
