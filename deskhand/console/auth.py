"""Sign-in: Django's LoginView with the email as the username, and a brake on guessing.

Failed attempts are counted per client address *and* per username in the
cache, in a fixed one-minute window; the eleventh failure within the window
answers 429 before the password is even checked. The counter is per process
(the default local-memory cache) — enough to stop a script hammering one web
process; a shared cache backend makes it global without code changes.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

from deskhand.console.decorators import refuse

MAX_FAILURES = 10
WINDOW_SECONDS = 60


class EmailAuthenticationForm(AuthenticationForm):
    username = forms.EmailField(
        label="Email",
        max_length=254,
        widget=forms.EmailInput(attrs={"autofocus": True, "autocomplete": "email"}),
    )

    def clean_username(self) -> str:
        # Usernames are the email as seeded, lower case.
        return str(self.cleaned_data["username"]).strip().lower()


def _key(request: HttpRequest) -> str:
    who = str(request.POST.get("username", "")).strip().lower()[:254]
    ip = request.META.get("REMOTE_ADDR", "")
    digest = hashlib.sha256(f"{ip}|{who}".encode()).hexdigest()[:32]
    return f"login-failures:{digest}"


class RateLimitedLoginView(LoginView):
    form_class = EmailAuthenticationForm
    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if int(cache.get(_key(request), 0)) >= MAX_FAILURES:
            return refuse(
                request,
                429,
                "Too many failed sign-in attempts for this account from here. Wait a minute and try again.",
            )
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        key = _key(self.request)
        if cache.add(key, 1, WINDOW_SECONDS) is False:
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, WINDOW_SECONDS)
        return super().form_invalid(form)


login_view = RateLimitedLoginView.as_view()
