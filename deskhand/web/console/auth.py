"""Sign-in: Django's LoginView with the email as the username, and a brake on guessing.

The brake is the edge's shared throttle (deskhand/infra/edge/throttle.py): failures
are rows in Postgres keyed on the user name and the client address, so every
web process — and the admin's own sign-in — sees the same count. Ten failures
within 15 minutes lock that pair for 15 minutes: the next attempt is answered
429 before the password is even checked.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from deskhand.domain.desk.models import Membership, Merchant
from deskhand.infra.edge.throttle import throttled


class EmailAuthenticationForm(AuthenticationForm):
    username = forms.EmailField(
        label="Email",
        max_length=254,
        widget=forms.EmailInput(attrs={"autofocus": True, "autocomplete": "email"}),
    )

    def clean_username(self) -> str:
        # Usernames are the email as seeded, lower case.
        return str(self.cleaned_data["username"]).strip().lower()


class ConsoleLoginView(LoginView):
    form_class = EmailAuthenticationForm
    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        """On a fresh deployment (no merchant), the sign-in page says how to make one."""
        context = super().get_context_data(**kwargs)
        context["no_merchant"] = not Merchant.objects.exists()
        return context

    def get_default_redirect_url(self) -> str:
        """Merchant people land on the console; a staff auditor with no merchant on the audit desk."""
        user = self.request.user
        if user.is_staff and not Membership.objects.filter(user_id=user.pk).exists():
            return reverse("admin:index")
        return super().get_default_redirect_url()


# A form view takes PUT as a POST (Django's ProcessFormView); a sign-in is a POST only.
login_view = require_http_methods(["GET", "HEAD", "POST"])(throttled(ConsoleLoginView.as_view()))
