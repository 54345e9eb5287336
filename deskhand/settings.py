"""Settings for Deskhand: one module, values from the environment.

Two database modes: ``DATABASE_URL`` names a Postgres server; without it the
app starts (or joins) an embedded Postgres under ``.deskhand/`` so a fresh
machine needs nothing installed. Never SQLite: DBOS keeps its system tables
in the same database as the Django models, and the idempotency ledger relies
on Postgres row locks.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url

from deskhand import embedded_pg

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def _local_secret(name: str) -> str:
    """A secret generated once and kept under the local data folder (demo only)."""
    path = embedded_pg.data_dir() / name
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY") or _local_secret("secret_key")
# Keys the per-run fence token that marks untrusted text for the model.
FENCE_KEY = os.environ.get("DESKHAND_FENCE_KEY") or _local_secret("fence_key")
ALLOWED_HOSTS = [
    h
    for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",")
    if h
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_htmx",
    "deskhand.desk",
    "agent",
    "approvals",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "deskhand.urls"
WSGI_APPLICATION = "deskhand.wsgi.application"
ASGI_APPLICATION = "deskhand.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
                "deskhand.desk.context_processors.deskhand",
            ],
        },
    },
]

# 0 closes a connection after each request or step. Workers may keep them (e.g. 60): every
# step then saves a 4-6 ms connect (docs/benchmarks.md), at one connection per step thread.
CONN_MAX_AGE = env_int("DESKHAND_CONN_MAX_AGE", 0)
if os.environ.get("DATABASE_URL"):
    DATABASES = {
        "default": dj_database_url.parse(
            os.environ["DATABASE_URL"], conn_max_age=CONN_MAX_AGE, conn_health_checks=True
        )
    }
    USING_EMBEDDED_POSTGRES = False
else:
    DATABASES = {
        "default": dj_database_url.parse(
            embedded_pg.ensure_running(), conn_max_age=CONN_MAX_AGE, conn_health_checks=True
        )
    }
    USING_EMBEDDED_POSTGRES = True
DATABASES["default"]["ENGINE"] = "django.db.backends.postgresql"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").exists() else []

# --- Safe by default -------------------------------------------------------
from django.utils.csp import CSP  # noqa: E402

SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
}
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = env_bool("DESKHAND_HTTPS", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DESKHAND_LOG_LEVEL", "INFO")},
    "loggers": {
        "dbos": {"level": os.environ.get("DBOS_LOG_LEVEL", "WARNING")},
        "httpx": {"level": "WARNING"},
    },
}

# --- Deskhand --------------------------------------------------------------
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL") or None
ANTHROPIC_MODEL = os.environ.get("DESKHAND_MODEL", "claude-sonnet-4-6")
# Pinned so a restarted worker recovers the workflows its predecessor started.
DESKHAND_APP_VERSION = os.environ.get("DESKHAND_APP_VERSION", "deskhand-1")
DESKHAND_QUEUE = "deskhand-runs"
# How often queue workers poll; low in tests and the demo for a snappy feel.
DESKHAND_QUEUE_POLL_SEC = float(os.environ.get("DESKHAND_QUEUE_POLL_SEC", "0.2"))
# A run's default bounds, snapshotted on the run row at creation.
DESKHAND_BOUNDS = {
    "max_steps": env_int("DESKHAND_MAX_STEPS", 24),
    "max_tokens": env_int("DESKHAND_MAX_TOKENS", 400_000),
    "max_spend_micros": env_int("DESKHAND_MAX_SPEND_MICROS", 2_000_000),
    "deadline_seconds": env_int("DESKHAND_DEADLINE_SECONDS", 900),
    "max_refund_cents": env_int("DESKHAND_MAX_REFUND_CENTS", 25_000),
    "loop_threshold": env_int("DESKHAND_LOOP_THRESHOLD", 3),
}
DESKHAND_PLATFORM_DAILY_SPEND_MICROS = env_int("DESKHAND_PLATFORM_DAILY_SPEND_MICROS", 50_000_000)
# Scripted provider's reported usage per call, so accounting is exercised keylessly.
DESKHAND_SCRIPTED_TOKENS = (
    env_int("DESKHAND_SCRIPTED_INPUT_TOKENS", 1200),
    env_int("DESKHAND_SCRIPTED_OUTPUT_TOKENS", 150),
)
DESKHAND_SCRIPTED_COST_MICROS = env_int("DESKHAND_SCRIPTED_COST_MICROS", 1000)
