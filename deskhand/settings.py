"""Settings for Deskhand: one module, values from the environment.

Two database modes: ``DATABASE_URL`` names a Postgres server; without it the
app uses an embedded Postgres under ``.deskhand/`` so a fresh machine needs
nothing installed. Importing this module starts nothing: the embedded server
starts (or is joined) on a process's first database connection. Never SQLite:
DBOS keeps its system tables in the same database as the Django models, and
the idempotency ledger relies on Postgres row locks.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import secrets
from pathlib import Path

import dj_database_url

from deskhand.infra import embedded_pg, retry

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
# Fernet keys that seal merchants' credentials at rest (deskhand/infra/sealed.py):
# comma-separated, the first seals, any opens (rotate: a new key first, then
# `manage.py rotate_secrets`). Unset, one derived from a secret kept under .deskhand/ —
# for the demo and the tests only; a deployment sets it.
DESKHAND_SECRET_KEYS = (
    os.environ.get("DESKHAND_SECRET_KEYS")
    or base64.urlsafe_b64encode(
        hashlib.sha256(b"deskhand-sealing-key:" + _local_secret("sealing_key").encode()).digest()
    ).decode()
)
# Where Shopify's Admin API is reached instead of https://<shop>: the local double (tests, demo).
DESKHAND_SHOPIFY_BASE_URL = os.environ.get("DESKHAND_SHOPIFY_BASE_URL", "")
ALLOWED_HOSTS = [
    h
    for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",")
    if h
]

INSTALLED_APPS = [
    "deskhand.admin_site.AuditAdminConfig",  # django.contrib.admin, GET/HEAD/POST only
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_htmx",
    "ninja",  # the API's docs page and its Swagger UI files, served from here (no CDN)
    "deskhand.domain.desk",
    "deskhand.domain.mail",
    "deskhand.domain.apikeys",
    "deskhand.domain.store",
    "approvals",
    "agent",
    "deskhand.web.console",
    "deskhand.web.api",
    "deskhand.infra.edge",
    "deskhand.infra.fleet",
    "deskhand.engine",
]


def _development_apps() -> list[str]:
    """``tests.devtools`` (evals, crash sweep, bench, synthetic volume) exists in a checkout
    only, never in the wheel."""
    try:
        return ["tests.devtools"] if importlib.util.find_spec("tests.devtools") else []
    except ModuleNotFoundError:
        return []


INSTALLED_APPS += _development_apps()

# ``seed --synthetic N``: development code, found by name so the product never imports tests.
DESKHAND_SYNTHETIC_GENERATOR = (
    "tests.devtools.synthetic.synthetic_generate" if _development_apps() else ""
)

MIDDLEWARE = [
    # Outermost: the Content-Length is computed from the body that actually leaves.
    "deskhand.infra.edge.middleware.content_length",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Outside refuse_malformed and the 503 page, so the pages that answer before any view
    # carry X-Frame-Options like every other page (issue 40).
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "deskhand.infra.edge.middleware.refuse_malformed",
    "deskhand.infra.edge.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
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
                "deskhand.domain.desk.context_processors.deskhand",
                "deskhand.web.console.context.attention",
            ],
        },
    },
]

# 0 closes a connection after each request or step. Workers may keep them (e.g. 60): every
# step then saves a 4-6 ms connect (docs/benchmarks.md), at one connection per step thread.
CONN_MAX_AGE = env_int("DESKHAND_CONN_MAX_AGE", 0)
# Query options of DATABASE_URL (sslmode, connect_timeout, application_name, options, …)
# land in OPTIONS; deskhand.infra.dbos.client.database_url() hands the same ones to DBOS.
USING_EMBEDDED_POSTGRES = not os.environ.get("DATABASE_URL")
DATABASES = {
    "default": dj_database_url.parse(
        embedded_pg.url() if USING_EMBEDDED_POSTGRES else os.environ["DATABASE_URL"],
        conn_max_age=CONN_MAX_AGE,
        conn_health_checks=True,
    )
}
# The embedded server starts on the first connection a process opens, not here.
DATABASES["default"]["ENGINE"] = (
    "deskhand.infra.embedded_db" if USING_EMBEDDED_POSTGRES else "django.db.backends.postgresql"
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in (
        "UserAttributeSimilarityValidator",
        "MinimumLengthValidator",
        "CommonPasswordValidator",
        "NumericPasswordValidator",
    )
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
# DESKHAND_HTTPS=1: the site is served over HTTPS only (behind a proxy that terminates TLS,
# listed in DESKHAND_TRUSTED_PROXIES, whose X-Forwarded-Proto `manage.py web` believes).
# Secure cookies, a redirect of plain HTTP to HTTPS (except /healthz, which a load
# balancer probes over plain HTTP), and HSTS for a year on every subdomain; each can be
# turned down on its own. `manage.py check --deploy` is clean with the production
# settings of docs/operations.md (tests/edge/test_deploy_check.py).
DESKHAND_HTTPS = env_bool("DESKHAND_HTTPS", False)
SESSION_COOKIE_SECURE = DESKHAND_HTTPS
CSRF_COOKIE_SECURE = DESKHAND_HTTPS
SESSION_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = env_bool("DESKHAND_SSL_REDIRECT", DESKHAND_HTTPS)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int("DESKHAND_HSTS_SECONDS", 365 * 24 * 3600 if DESKHAND_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DESKHAND_HSTS_INCLUDE_SUBDOMAINS", DESKHAND_HTTPS)
# Asks browsers' makers to hard-code HTTPS for the domain: a decision made once, on purpose.
SECURE_HSTS_PRELOAD = env_bool("DESKHAND_HSTS_PRELOAD", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DESKHAND_LOG_LEVEL", "INFO")},
    "loggers": {
        "dbos": {"level": os.environ.get("DBOS_LOG_LEVEL", "WARNING")},
        "httpx": {"level": "WARNING"},
        # aiosmtpd (the SMTP receiver) logs every connection at INFO.
        "mail.log": {"level": "WARNING"},
        # The Stripe SDK logs every request and every error's message at INFO, and an error
        # may echo the secret key it was sent; the payments adapter says what matters, redacted.
        "stripe": {"level": "WARNING"},
    },
}

# --- Deskhand --------------------------------------------------------------
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL") or None
ANTHROPIC_MODEL = os.environ.get("DESKHAND_MODEL", "claude-sonnet-4-6")
# The one retry layer for a model call (deskhand.infra.retry.MODEL, every policy and the worst case
# there): attempts in all, the first backoff in seconds (doubled each time), the cap on one
# wait and on all waiting. The workflow never retries a model step on top of this.
ANTHROPIC_RETRY = {
    "max_attempts": int(os.environ.get("DESKHAND_MODEL_ATTEMPTS", str(retry.MODEL.max_attempts))),
    "base_delay": float(os.environ.get("DESKHAND_MODEL_BACKOFF", str(retry.MODEL.base_delay))),
    "max_delay": retry.MODEL.max_delay,
    "budget_seconds": retry.MODEL.budget_seconds,
}
# Notifications (approvals/outbox.py): the console's address for links, the Message-ID domain,
# how long before expiry a pending approval is warned about, and the mail backend (the console
# backend in the demo; smtp with EMAIL_HOST/EMAIL_PORT in production).
DESKHAND_CONSOLE_URL = os.environ.get("DESKHAND_CONSOLE_URL", "http://localhost:8000")
DESKHAND_MESSAGE_ID_DOMAIN = os.environ.get("DESKHAND_MESSAGE_ID_DOMAIN", "deskhand.local")
# How long an invitation to a merchant's team stays good (a resend starts it again).
DESKHAND_INVITATION_DAYS = env_int("DESKHAND_INVITATION_DAYS", 7)
DESKHAND_APPROVAL_EXPIRY_WARNING_SECONDS = env_int(
    "DESKHAND_APPROVAL_EXPIRY_WARNING_SECONDS", 30 * 60
)
_MAIL_BACKEND = os.environ.get(
    "DESKHAND_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
)
MAILERS = {
    "default": {
        "BACKEND": _MAIL_BACKEND,
        "OPTIONS": (
            {
                "host": os.environ.get("DESKHAND_EMAIL_HOST", "localhost"),
                "port": env_int("DESKHAND_EMAIL_PORT", 25),
                "timeout": env_int("DESKHAND_EMAIL_TIMEOUT", 10),
            }
            if _MAIL_BACKEND.endswith("smtp.EmailBackend")
            else {}
        ),
    }
}
DEFAULT_FROM_EMAIL = os.environ.get("DESKHAND_FROM_EMAIL", "Deskhand <deskhand@localhost>")


def release_version() -> str:
    """The application version DBOS stamps on every run: the release's, never a constant.

    ``DESKHAND_APP_VERSION`` (a deploy that names it) wins; else ``DESKHAND_RELEASE`` (the
    build's tag or commit) as ``deskhand-<release>``; else the installed package's version
    (pyproject.toml, bumped by each release). Runs parked under a version finish on a
    worker of that version left draining, or are moved on with ``manage.py move_runs``
    (docs/deploys.md).
    """
    explicit = os.environ.get("DESKHAND_APP_VERSION", "").strip()
    if explicit:
        return explicit
    release = os.environ.get("DESKHAND_RELEASE", "").strip()
    if release:
        return f"deskhand-{release}"
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"deskhand-{version('deskhand')}"
    except PackageNotFoundError:
        return "deskhand-unreleased"


DESKHAND_APP_VERSION = release_version()
DESKHAND_QUEUE = "deskhand-runs"
# How often the runs queue and DBOS's internal queue poll when nothing tells them to.
# Enqueueing NOTIFYs deskhand_queue, and every worker LISTENs and polls at once
# (deskhand.engine.queues), so the interval is only the fallback for a lost notification and
# for DBOS's own enqueues (schedules): long is cheap when idle, and each poll walks every
# active workflow of the worker, parked ones included (docs/fleet.md, "Queue polling").
DESKHAND_QUEUE_POLL_SEC = float(os.environ.get("DESKHAND_QUEUE_POLL_SEC", "5.0"))
# Model calls per provider across every worker (docs/rate-limits.md): each call is a child
# workflow on the DBOS queue ``model-<provider>`` with limiter {limit: RPM, period}. A
# provider not named here (the scripted policy) is unlimited: a plain step, no queue.
# DESKHAND_MODEL_RPM="anthropic=50,other=10"; 0 or "" switches a provider's limit off.
DESKHAND_MODEL_RPM = {
    name.strip(): int(rpm)
    for name, _, rpm in (
        p.partition("=") for p in os.environ.get("DESKHAND_MODEL_RPM", "anthropic=50").split(",")
    )
    if name.strip() and rpm.strip() and int(rpm) > 0
}
DESKHAND_MODEL_LIMIT_PERIOD_SEC = float(os.environ.get("DESKHAND_MODEL_LIMIT_PERIOD_SEC", "60"))
# The model queues' polling interval, a fallback only. The worker that enqueues a call
# kicks its own queue threads at once, and once a second while the call waits
# (deskhand.engine.queues.queues_kicked_while_waiting), so a call held by the limiter starts
# within ~1 s of its slot freeing; idle, nothing polls fast. 0.1 s polling all day cost ~10%
# of a core per worker, 1 s ~2% (docs/scaling.md, "Idle cost, explained").
DESKHAND_MODEL_QUEUE_POLL_SEC = float(os.environ.get("DESKHAND_MODEL_QUEUE_POLL_SEC", "10"))
# How long a run waits for its limited call's message before asking DBOS for the child's
# result directly (which polls once a second): only a lost message ever gets that far.
DESKHAND_LIMITED_WAIT_SEC = float(os.environ.get("DESKHAND_LIMITED_WAIT_SEC", "3600"))
# Model calls one merchant may have in flight per worker: the fairness cap (docs/fleet.md).
# It counts working model calls, never parked runs.
DESKHAND_MERCHANT_MODEL_CALLS = int(os.environ.get("DESKHAND_MERCHANT_MODEL_CALLS", "8"))
# The fleet (docs/fleet.md): a worker renews its lease every HEARTBEAT seconds; one whose
# lock has been free, and whose last renewal is older than GRACE, has its runs taken over
# by a live worker, which looks every SCAN seconds. A Postgres restart frees every lock at
# once: GRACE must outlast a restart, and is well over twice the heartbeat.
DESKHAND_HEARTBEAT_SEC = float(os.environ.get("DESKHAND_HEARTBEAT_SEC", "1"))
DESKHAND_TAKEOVER_GRACE_SEC = float(os.environ.get("DESKHAND_TAKEOVER_GRACE_SEC", "10"))
DESKHAND_TAKEOVER_SCAN_SEC = float(os.environ.get("DESKHAND_TAKEOVER_SCAN_SEC", "2"))
# How often a worker looks for its own runs stranded PENDING (their coroutine died with a
# Postgres restart): every takeover scan for this long after it re-took its lease, which
# is when they strand, and otherwise every STRANDED_CHECK seconds. The look reads every
# run this worker holds, so at every scan it cost idle CPU in proportion to parked runs.
DESKHAND_STRANDED_WINDOW_SEC = float(os.environ.get("DESKHAND_STRANDED_WINDOW_SEC", "120"))
DESKHAND_STRANDED_CHECK_SEC = float(os.environ.get("DESKHAND_STRANDED_CHECK_SEC", "60"))
# A restarted worker hands its own pending runs back a BATCH at a time, while fewer than
# MAX_REPLAYING replay, runs with a decision waiting first (docs/scaling.md).
DESKHAND_RECOVERY_BATCH = int(os.environ.get("DESKHAND_RECOVERY_BATCH", "32"))
DESKHAND_RECOVERY_MAX_REPLAYING = int(os.environ.get("DESKHAND_RECOVERY_MAX_REPLAYING", "64"))
# Parked runs: DBOS re-checks each waiting recv every minute (one transaction per parked
# run); here each re-checks on its own only hourly, and one sweep per worker re-checks
# all of them every SWEEP seconds with one query (docs/scaling.md, "Parked runs").
DESKHAND_RECV_RECHECK_SEC = float(os.environ.get("DESKHAND_RECV_RECHECK_SEC", "3600"))
DESKHAND_RECV_SWEEP_SEC = float(os.environ.get("DESKHAND_RECV_SWEEP_SEC", "30"))
# A run's default bounds, snapshotted on the run row at creation.
DESKHAND_BOUNDS = {
    "max_steps": env_int("DESKHAND_MAX_STEPS", 24),
    "max_tokens": env_int("DESKHAND_MAX_TOKENS", 400_000),
    "max_spend_micros": env_int("DESKHAND_MAX_SPEND_MICROS", 2_000_000),
    "deadline_seconds": env_int("DESKHAND_DEADLINE_SECONDS", 900),
    "max_refund_cents": env_int("DESKHAND_MAX_REFUND_CENTS", 25_000),
    "loop_threshold": env_int("DESKHAND_LOOP_THRESHOLD", 3),
}
# The scheduled sweeps' own DBOS history (one workflow per firing) is kept this long.
DESKHAND_SWEEP_HISTORY_DAYS = env_int("DESKHAND_SWEEP_HISTORY_DAYS", 7)
DESKHAND_PLATFORM_DAILY_SPEND_MICROS = env_int("DESKHAND_PLATFORM_DAILY_SPEND_MICROS", 50_000_000)
# Scripted provider's reported usage per call, so accounting is exercised keylessly.
DESKHAND_SCRIPTED_TOKENS = (
    env_int("DESKHAND_SCRIPTED_INPUT_TOKENS", 1200),
    env_int("DESKHAND_SCRIPTED_OUTPUT_TOKENS", 150),
)
DESKHAND_SCRIPTED_COST_MICROS = env_int("DESKHAND_SCRIPTED_COST_MICROS", 1000)

# --- Inbound mail (deskhand/domain/mail, docs/inbound-mail.md) --------------------
# A message larger than this is stored as rejected (its first bytes only) and refused.
DESKHAND_INBOUND_MAX_BYTES = env_int("DESKHAND_INBOUND_MAX_BYTES", 10 * 1024 * 1024)
# An attachment's bytes are kept up to this size; a larger one is kept by name, type and size.
DESKHAND_INBOUND_ATTACHMENT_MAX_BYTES = env_int(
    "DESKHAND_INBOUND_ATTACHMENT_MAX_BYTES", 5 * 1024 * 1024
)
DESKHAND_INBOUND_MAX_ATTACHMENTS = env_int("DESKHAND_INBOUND_MAX_ATTACHMENTS", 20)
# The authserv-ids (RFC 8601) of the mail servers whose Authentication-Results header is
# believed, comma-separated (e.g. "mx.example.com"); any other such header is the sender's.
DESKHAND_INBOUND_AUTHSERV_IDS = [
    a.strip().lower()
    for a in os.environ.get("DESKHAND_INBOUND_AUTHSERV_IDS", "").split(",")
    if a.strip()
]
# How old a signed webhook may be (its signed timestamp) before it is refused as stale.
DESKHAND_INBOUND_WEBHOOK_TOLERANCE_SECONDS = env_int(
    "DESKHAND_INBOUND_WEBHOOK_TOLERANCE_SECONDS", 15 * 60
)
# The raw bytes of a processed message are dropped after this many days (the thread keeps
# its text); a message no merchant owned is deleted after as long.
DESKHAND_INBOUND_RAW_RETENTION_DAYS = env_int("DESKHAND_INBOUND_RAW_RETENTION_DAYS", 30)
# Intake workflows (a stored message processed, a customer's line routed) a worker runs at
# once: a burst of mail waits on the queue rather than taking every thread.
DESKHAND_INTAKE_CONCURRENCY = env_int("DESKHAND_INTAKE_CONCURRENCY", 8)
# A stored message still unprocessed, or a customer's line still unrouted, this long after
# it was committed is re-driven by the worker's sweep (its own enqueue may have been lost
# to a crash). Short on purpose: a second enqueue under the same workflow id is harmless.
DESKHAND_INTAKE_GRACE_SEC = env_int("DESKHAND_INTAKE_GRACE_SEC", 5)
# django-anymail: the Mailgun webhook signing key (Mailgun's "HTTP webhook signing key").
ANYMAIL = {
    "MAILGUN_WEBHOOK_SIGNING_KEY": os.environ.get("DESKHAND_MAILGUN_WEBHOOK_SIGNING_KEY", ""),
}
# A webhook posts the whole message as a form field: room for the largest message we take,
# base64 and form-encoding included (otherwise Django refuses the post before we see it).
DATA_UPLOAD_MAX_MEMORY_SIZE = 3 * DESKHAND_INBOUND_MAX_BYTES + 1024 * 1024

# --- Edge: input validation and login protection (deskhand/infra/edge) -----------
# Failed sign-ins are counted in Postgres (edge.LoginFailure), per user name and client
# address: this many within the cool-off lock that pair for the cool-off (then it lifts);
# and per user name over every address: NAME_FAILURE_LIMIT lock the name from everywhere.
DESKHAND_LOGIN_FAILURE_LIMIT = env_int("DESKHAND_LOGIN_FAILURE_LIMIT", 10)
DESKHAND_LOGIN_NAME_FAILURE_LIMIT = env_int("DESKHAND_LOGIN_NAME_FAILURE_LIMIT", 30)
DESKHAND_LOGIN_COOLOFF_SECONDS = env_int("DESKHAND_LOGIN_COOLOFF_SECONDS", 15 * 60)
# Addresses or networks of reverse proxies whose X-Forwarded-For is believed, comma-separated
# (e.g. "127.0.0.1,10.0.0.0/8"). Empty (the default): the header is ignored.
DESKHAND_TRUSTED_PROXIES = [
    p.strip() for p in os.environ.get("DESKHAND_TRUSTED_PROXIES", "").split(",") if p.strip()
]

# The JSON API (docs/api.md): requests one key may make per window, and the window.
DESKHAND_API_KEY_LIMIT = env_int("DESKHAND_API_KEY_LIMIT", 600)
DESKHAND_API_KEY_LIMIT_PERIOD_SEC = env_int("DESKHAND_API_KEY_LIMIT_PERIOD_SEC", 60)
