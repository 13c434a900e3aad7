"""Gaia settings: one module, driven by the environment (django-environ).

Every variable is documented in ``.env.example``. With no environment at all Gaia runs whole on
one machine: SQLite under ``GAIA_DATA_DIR``, an in-memory channel layer and Celery tasks executed
eagerly in-process. Setting ``REDIS_URL`` switches the channel layer to channels-redis, the
Celery broker to Redis and the cache (rate limits) to Redis.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("GAIA_DEBUG", default=False)
DATA_DIR = Path(env.str("GAIA_DATA_DIR", default=str(BASE_DIR / "var"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in the data dir."""
    key = env.str("SECRET_KEY", default="")
    if key:
        return key
    path = DATA_DIR / "secret_key"
    if not path.exists():
        # Made whole, then linked into place: processes starting together (CI's two legs,
        # a server and its workers) each either make it or read a whole one. Written in
        # place, one read it empty while another wrote it, and ran with no key at all.
        tmp = path.with_name(f".secret_key.{os.getpid()}")
        tmp.write_text(secrets.token_urlsafe(50))
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: its key is the one
        finally:
            tmp.unlink()
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
# Browser pages on other origins that may use the operator API (/api, with credentials) and
# open the /ws feed: GUIs are consumers of the API (reference 003). Exact origins
# (scheme://host[:port]); empty (the default): Gaia's own pages only.
GAIA_OPERATOR_ALLOWED_ORIGINS = env.list("GAIA_OPERATOR_ALLOWED_ORIGINS", default=[])
CSRF_TRUSTED_ORIGINS = [*env.list("CSRF_TRUSTED_ORIGINS", default=[]),
                        *GAIA_OPERATOR_ALLOWED_ORIGINS]

# HTTPS (see "Production behind HTTPS" in .env.example; `manage.py check --deploy` is clean
# with those values). Off by default: a local server speaks plain HTTP.
SECURE_SSL_REDIRECT = env.bool("GAIA_SECURE_SSL_REDIRECT", default=False)
SECURE_REDIRECT_EXEMPT = [r"^health$"]  # load balancers probe over plain HTTP
SECURE_HSTS_SECONDS = env.int("GAIA_SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("GAIA_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("GAIA_SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("GAIA_SECURE_COOKIES", default=False)
if env.bool("GAIA_SECURE_PROXY_SSL_HEADER", default=False):
    # Only behind a proxy that sets X-Forwarded-Proto itself and strips it from clients.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_celery_beat",
    "agents",
    "openai_api",
    "a2a_api",
    "benchmarks",
]

MIDDLEWARE = [
    "corsheaders.middleware.CorsMiddleware",
    "agents.http.middleware.OperatorCorsMiddleware",
    "openai_api.middleware.ApiEdgeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# The machine API (/v1, /health) runs behind these only: natively async, no thread hops, no
# sessions or CSRF (API keys, not cookies). See gaia_site/asgi.py.
API_MIDDLEWARE = [
    "corsheaders.middleware.CorsMiddleware",
    "agents.http.middleware.OperatorCorsMiddleware",
    "openai_api.middleware.ApiEdgeMiddleware",
]

ROOT_URLCONF = "gaia_site.urls"
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
            ],
            # The console's tags live with its pages (agents/pages/), not at the app's top.
            "libraries": {"gaia_sort": "agents.pages.templatetags.gaia_sort",
                          "gaia_admin": "agents.pages.templatetags.gaia_admin",
                          "gaia_nav": "agents.pages.templatetags.gaia_nav"},
        },
    },
]
WSGI_APPLICATION = None
ASGI_APPLICATION = "gaia_site.asgi.application"

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'gaia.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the server read while another process (a worker, a test) writes; IMMEDIATE
    # transactions take the write lock up front instead of failing mid-transaction. A kept
    # connection's page cache holds up to 64 MiB (SQLite's default is 2 MiB): at 100,000
    # threads a search's id lookups took 3.6 ms a query with 2 MiB and 0.9-1.4 ms with 64
    # (issue 27); it fills only as pages are read, so a small database costs what it is.
    # Temporary files in memory: a turn's inserts fire triggers (search index, tallies), so
    # SQLite keeps each statement's undo pages, which outgrew its 64 KiB in memory and went to
    # a file made, written and deleted in /var/tmp per turn (62 of a turn's 332 system calls).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": ("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                             "PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY;"),
        }
    )
# Kept by the threads that use them (the pages' and operator API's threads,
# gaia_site.site_handler; /v1's database threads, agents.infra.database), checked before reuse. On
# SQLite too: a connection opened per request starts with an empty page cache, and at 100,000
# threads the operator API's thread search took 34 ms in the server against 20 ms on a kept
# connection (issue 27).
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("GAIA_DB_CONN_MAX_AGE", default=300))
# A turn's few statements of a fixed text are prepared on each PostgreSQL connection
# (agents.infra.rows.rows_cursor): off behind a transaction-mode pooler older than PgBouncer
# 1.21, which cannot keep a connection's prepared statements.
GAIA_DB_PREPARED_STATEMENTS = env.bool("GAIA_DB_PREPARED_STATEMENTS", default=True)
if GAIA_DB_PREPARED_STATEMENTS and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # psycopg prepares nothing of itself (a threshold no statement reaches: Django's is
    # "never", which would refuse the turn's too); the turn's statements ask to be.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 2**31)
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="")

# Messages a channel (a feed socket, or with Redis a whole process's share) may hold before the
# layer drops new ones silently (both layers default to 100). A feed consumer drains its channel
# into its own bounded queue at once and reports what it drops (``lagged``), so this only has to
# ride out bursts; each message is one batch of events (agents.outlet.realtime).
GAIA_CHANNEL_CAPACITY = env.int("GAIA_CHANNEL_CAPACITY", default=2000)

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # channels-redis blocks up to 5 s in BZPOPMIN; redis-py 8 defaults every socket
            # read to a 5 s timeout, which then fails that read and stalls every receiver
            # of the process (the feed, the control listener, /health) until it recovers.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                       "capacity": GAIA_CHANNEL_CAPACITY},
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
            # Rate limits count here: an unreachable Redis must fail fast, not hang requests
            # (api_key_throttle then counts in the process).
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer",
                                  "CONFIG": {"capacity": GAIA_CHANNEL_CAPACITY}}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: Redis when REDIS_URL is set, else tasks run eagerly in the calling process.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 6 * 3600}
CELERY_TASK_TIME_LIMIT = 4 * 3600
# Schedules (agents/services/schedules.py): Celery beat reads them from the database
# (`celery -A gaia_site beat`); without REDIS_URL the server runs a beat in a thread of its
# own (GAIA_EMBEDDED_BEAT=0: none, another process beats).
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
GAIA_EMBEDDED_BEAT = env.bool("GAIA_EMBEDDED_BEAT", default=True)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# Gaia speaks one language (no LocaleMiddleware, LANGUAGE_CODE fixed), so Django's translation
# machinery only ever translated English into English, and at a price: each gettext() and
# get_language() reads the active language from an asgiref Local, which takes a process-wide
# lock, and the site's threads queued on that lock. The admin's thread list at 100,000 threads
# (scripts/perf/data_scale.py, PostgreSQL, 8 site threads) cost 27 ms of server CPU a request
# at c=1 and 50 ms at c=8 (0.65x the requests/s); without the machinery 21 and 24 ms (1.0x).
# The pages read the same: Django's documented switch for a site in one language.
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# Benchmark artifacts go to the default storage: files under the data dir, or any Django
# storage backend (e.g. django-storages' S3) by changing this setting alone.
_STORAGE_BACKEND = env.str("GAIA_STORAGE_BACKEND", default="")
STORAGES = {
    "default": {
        "BACKEND": _STORAGE_BACKEND or "django.core.files.storage.FileSystemStorage",
        "OPTIONS": env.json("GAIA_STORAGE_OPTIONS", default={}) if _STORAGE_BACKEND
        else {"location": str(DATA_DIR / "files")},
    },
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# Any origin may call /v1 without credentials unless origins are listed: keys are bearer
# headers, not cookies, and browser chat UIs call /v1 directly.
CORS_ALLOWED_ORIGINS = env.list("CORS_ALLOWED_ORIGINS", default=[])
CORS_ALLOW_ALL_ORIGINS = not CORS_ALLOWED_ORIGINS
CORS_ALLOW_CREDENTIALS = env.bool("CORS_ALLOW_CREDENTIALS", default=False)
CORS_URLS_REGEX = r"^/(v1/|health|$).*$"
CORS_ALLOW_HEADERS = [
    "accept",
    "authorization",
    "content-type",
    "user-agent",
    "x-api-key",
    "x-session-id",
    "x-gaia-thread-id",
    "x-openwebui-chat-id",
    "x-librechat-conversation-id",
    "x-librechat-user-id",
    "x-claude-code-session-id",
    "session-id",
    "anthropic-version",
    "anthropic-beta",
    "openai-beta",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
]
CORS_EXPOSE_HEADERS = ["x-gaia-thread-id", "x-gaia-context-trimmed", "retry-after"]

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # The operator API (agents/apis.py) speaks JSON only: no browsable HTML, no form posts.
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["agents.http.parsers.JsonParser"],
    "EXCEPTION_HANDLER": "agents.http.rest.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Gaia operator API",
    "DESCRIPTION": "Watch and control the agents (reference 003). Authenticate with an API key "
    "that has the 'operator' scope, or a staff session.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Swagger UI and Redoc from our own static files (drf-spectacular-sidecar), no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "ThreadStatusEnum": "agents.models.Thread.Status",
        "BenchmarkRunStatusEnum": "benchmarks.models.BenchmarkRun.Status",
        "BenchmarkRunKindEnum": "benchmarks.models.BenchmarkRun.Kind",
        "BenchmarkSuiteKindEnum": "benchmarks.models.BenchmarkSuite.Kind",
        "ProviderKindEnum": "agents.models.Provider.Kind",
        "KeyStateEnum": ["active", "expired", "revoked"],
        "WebhookEventTypeEnum": "agents.models.webhooks.WEBHOOK_EVENT_TYPES",
    },
}

# Gaia behaviour.
GAIA_ALLOW_ANONYMOUS = env.bool("GAIA_ALLOW_ANONYMOUS", default=False)
GAIA_MAX_BODY_BYTES = env.int("GAIA_MAX_BODY_BYTES", default=20 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = GAIA_MAX_BODY_BYTES
GAIA_MAX_MESSAGES = env.int("GAIA_MAX_MESSAGES", default=2000)  # per request (400 above)
GAIA_KEEPALIVE_SECONDS = env.float("GAIA_KEEPALIVE_SECONDS", default=15.0)
# A turn's lease on its thread: renewed every third of it while the turn runs, so a thread
# whose server process died is free again (and its turn recorded as interrupted) this long after.
GAIA_THREAD_LOCK_SECONDS = env.float("GAIA_THREAD_LOCK_SECONDS", default=30.0)
GAIA_THREAD_WAIT_SECONDS = env.float("GAIA_THREAD_WAIT_SECONDS", default=300.0)
# A streaming reply's text so far is written to its thread at most this often (seconds), or
# sooner once it grew by GAIA_REPLY_CHECKPOINT_CHARS characters, so that a server process that
# dies (kill -9) leaves what its client already read (agents/turns/checkpoint.py). 0: off.
GAIA_REPLY_CHECKPOINT_SECONDS = env.float("GAIA_REPLY_CHECKPOINT_SECONDS", default=1.0)
GAIA_REPLY_CHECKPOINT_CHARS = env.int("GAIA_REPLY_CHECKPOINT_CHARS", default=2000)
GAIA_DEBUG_REQUESTS = env.bool("GAIA_API_DEBUG", default=False)
GAIA_SHOW_PROMPTS = env.bool("GAIA_SHOW_PROMPTS", default=False)
GAIA_DB_THREADS = env.int("GAIA_DB_THREADS", default=4)  # PostgreSQL; SQLite uses one
# Threads for the pages', operator API's and admin's requests (gaia_site.site_handler). More
# threads than the process can keep busy only pass the GIL around: at 100,000 threads, c=8
# against c=1 on SQLite kept 0.73-0.95x the requests/s with 8 threads, 0.89-1.0x with 4 and
# 0.95-1.14x with 2 (server CPU a request +30 %, +15 %, +5 %); PostgreSQL's round trips leave
# a thread waiting, and 4 kept 0.95-1.76x there (issue 27: the data_scale.py databases).
GAIA_SITE_THREADS = env.int(
    "GAIA_SITE_THREADS",
    default=2 if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" else 4)
# Pin each server process to a core of its own (Linux; gaia_site/affinity.py).
GAIA_PIN_CORES = env.bool("GAIA_PIN_CORES", default=False)
GAIA_LOCAL_MODEL_PATH = env.str("GAIA_LOCAL_MODEL_PATH", default="")
GAIA_ORGANISM_NAME = env.str("GAIA_ORGANISM_NAME", default="gaia")
# Benchmark runs (benchmarks/worker.py): without REDIS_URL the server runs them in a thread.
GAIA_EMBEDDED_WORKER = env.bool("GAIA_EMBEDDED_WORKER", default=True)
GAIA_BENCH_HEARTBEAT_SECONDS = env.float("GAIA_BENCH_HEARTBEAT_SECONDS", default=1.0)
GAIA_BENCH_STALE_SECONDS = env.float("GAIA_BENCH_STALE_SECONDS", default=30.0)
GAIA_BENCH_REAP_SECONDS = env.float("GAIA_BENCH_REAP_SECONDS", default=10.0)
GAIA_BENCH_MAX_ATTEMPTS = env.int("GAIA_BENCH_MAX_ATTEMPTS", default=2)
# Background responses (openai_api/background_run.py): run by Celery, or without REDIS_URL by
# the server's own thread; a response whose worker stops beating is queued again (or failed
# after its last attempt) by the same periodic check as benchmark runs.
GAIA_BACKGROUND_EMBEDDED = env.bool("GAIA_BACKGROUND_EMBEDDED", default=True)
GAIA_BACKGROUND_HEARTBEAT_SECONDS = env.float("GAIA_BACKGROUND_HEARTBEAT_SECONDS", default=1.0)
GAIA_BACKGROUND_STALE_SECONDS = env.float("GAIA_BACKGROUND_STALE_SECONDS", default=30.0)
GAIA_BACKGROUND_MAX_ATTEMPTS = env.int("GAIA_BACKGROUND_MAX_ATTEMPTS", default=2)
GAIA_BACKGROUND_MAX_EVENTS = env.int("GAIA_BACKGROUND_MAX_EVENTS", default=20000)
GAIA_BACKGROUND_EVENTS_TTL = env.int("GAIA_BACKGROUND_EVENTS_TTL", default=86400)
# The live feed (/ws): events queued per socket before it is "lagged", and how long a socket
# without a key or session may take to send its {"cmd": "auth"} message.
GAIA_FEED_QUEUE_MAX = env.int("GAIA_FEED_QUEUE_MAX", default=1000)
GAIA_FEED_AUTH_SECONDS = env.float("GAIA_FEED_AUTH_SECONDS", default=5.0)
# How often a process with key-authenticated feed sockets reads the configuration stamp (one
# query): a key revoked or expired meanwhile closes its sockets (4001) within this, even when
# the config_changed event cannot reach the process (no Redis).
GAIA_FEED_KEY_CHECK_SECONDS = env.float("GAIA_FEED_KEY_CHECK_SECONDS", default=2.0)
# How long a new feed socket waits for the channel layer (Redis) before it is closed with 1013.
GAIA_FEED_JOIN_SECONDS = env.float("GAIA_FEED_JOIN_SECONDS", default=5.0)
# Messages per second a server process sends its /ws?batch=1 sockets in all: each gets one per
# 0.1 s up to GAIA_FEED_BATCH_RATE / 10 sockets, then less often (100 sockets at 250: one every
# 0.4 s), so that however many dashboards watch, the feed's cost to /v1 stays bounded.
GAIA_FEED_BATCH_RATE = env.float("GAIA_FEED_BATCH_RATE", default=250.0)

# The MCP servers a Responses client may have Gaia call for it (its {"type": "mcp"} tools):
# streamable HTTP URLs, compared parsed (agents/selectors/urls.py): scheme, host and port
# exactly, and the path exactly, or, with a trailing "*", any path under it on a segment
# boundary ("http://h:8000/mcp*": /mcp, /mcp/x, not /mcpx). Empty (the default): none. Gaia never
# starts a process or reaches an address only because a client asked.
GAIA_MCP_ALLOWED_URLS = env.list("GAIA_MCP_ALLOWED_URLS", default=[])
# A2A (a2a_api): agent cards at /a2a/<slug>/.well-known/agent-card.json are read with a key
# that may use the agent, or by anyone when this is true.
GAIA_A2A_PUBLIC_CARDS = env.bool("GAIA_A2A_PUBLIC_CARDS", default=False)
# The address clients reach Gaia at (https://gaia.example.com behind a proxy): agent cards name
# it. Empty: each request's own scheme and Host header.
GAIA_PUBLIC_URL = env.str("GAIA_PUBLIC_URL", default="").rstrip("/")
# Remote A2A agents (a2a_agents): the URL a remote card says to call must be the URL the admin
# declared, or one of these (parsed, exact or a path prefix ending in '*', as
# GAIA_MCP_ALLOWED_URLS): a card cannot send the admin's credentials elsewhere.
GAIA_A2A_ALLOWED_URLS = env.list("GAIA_A2A_ALLOWED_URLS", default=[])
# Webhooks (/api/v1/webhooks, agents/services/webhooks.py): the URLs an endpoint may have,
# parsed and compared as GAIA_MCP_ALLOWED_URLS (exact, or a path prefix ending in '*'). When
# the list is empty any public http(s) address may be registered; a private, loopback or
# link-local address (or a name that resolves to one) only when it is listed; when the list
# is set, only what it lists.
GAIA_WEBHOOK_ALLOWED_URLS = env.list("GAIA_WEBHOOK_ALLOWED_URLS", default=[])
# Seconds between a delivery's failed attempt and the next: one attempt, then one more after
# each of these (the default: 6 attempts over 1 h 42 min), then the delivery has failed.
GAIA_WEBHOOK_RETRY_SECONDS = [float(s) for s in env.list(
    "GAIA_WEBHOOK_RETRY_SECONDS", default=["30", "120", "600", "1800", "3600"])]
# An attempt's whole time (connect, send, answer): a receiver that hangs fails the attempt.
GAIA_WEBHOOK_TIMEOUT_SECONDS = env.float("GAIA_WEBHOOK_TIMEOUT_SECONDS", default=10.0)
# Without Redis: at most this often, when a delivery is scheduled, the embedded worker also
# looks for deliveries left due (a retry's timer lost with a process that stopped).
GAIA_WEBHOOK_POLL_SECONDS = env.float("GAIA_WEBHOOK_POLL_SECONDS", default=30.0)
# Addresses (or networks: 10.0.0.0/8) that may read /metrics without a key; by default none,
# and Prometheus sends a key with the 'metrics' scope (gaia_site/metrics.py).
GAIA_METRICS_ALLOWED_IPS = env.list("GAIA_METRICS_ALLOWED_IPS", default=[])

# What one request may make its agents do, whatever the model asks (agents/turns/budget.py):
# past a limit the call is not run and the model gets an error result saying which limit, and
# the request still answers. Rounds of tools per turn are each agent's own max_steps.
GAIA_MAX_TOOL_CALLS_PER_ROUND = env.int("GAIA_MAX_TOOL_CALLS_PER_ROUND", default=16)
# Turns (the first one's and every delegated one's) and threads one request may start, counted
# over the whole tree of agents asking agents.
GAIA_MAX_TURNS_PER_REQUEST = env.int("GAIA_MAX_TURNS_PER_REQUEST", default=20)
GAIA_MAX_THREADS_PER_REQUEST = env.int("GAIA_MAX_THREADS_PER_REQUEST", default=20)
# Client turns one process runs at once; one more is answered 503 with Retry-After at once
# (agents.turns.admission; 0: no limit). One process (one event loop, one core) stops gaining
# requests/s at about 16 turns in flight (issue 37: 149/s at c=16, every turn beyond waits in
# line): twice that keeps an admitted turn within about twice its unloaded time; a provider
# that takes seconds per turn (turns that mostly wait) may want more, and --workers multiply it.
GAIA_MAX_TURNS_IN_FLIGHT = env.int("GAIA_MAX_TURNS_IN_FLIGHT", default=32)
# Delegated turns of one request running at once at each depth (the others wait their turn).
GAIA_MAX_CONCURRENT_DELEGATIONS = env.int("GAIA_MAX_CONCURRENT_DELEGATIONS", default=4)
# A tool's result as the model, the feed and the thread get it (the rest is cut, and said so).
GAIA_MAX_TOOL_RESULT_CHARS = env.int("GAIA_MAX_TOOL_RESULT_CHARS", default=20_000)
# Tool calls of one thread waiting for an approval (an operator's or a Responses client's).
GAIA_MAX_PENDING_APPROVALS = env.int("GAIA_MAX_PENDING_APPROVALS", default=10)
# What an agent's memory keeps per scope (a key's, or a user's as the key named them): facts
# of at most this many characters (a longer one is refused), the newest this many (a new one
# past it forgets the oldest). Every turn with memory ranks them (agents.selectors.memory).
GAIA_MEMORY_MAX_FACTS = env.int("GAIA_MEMORY_MAX_FACTS", default=200)
GAIA_MEMORY_MAX_FACT_CHARS = env.int("GAIA_MEMORY_MAX_FACT_CHARS", default=500)

# Gaia's logs (one gaia.access line per /v1 and /api request among them): plain text, or one
# JSON object per line whose fields a log pipeline can index.
GAIA_LOG_FORMAT = env.str("GAIA_LOG_FORMAT", default="plain")
if GAIA_LOG_FORMAT not in ("plain", "json"):
    raise ValueError(f"GAIA_LOG_FORMAT must be plain or json, not {GAIA_LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": GAIA_LOG_FORMAT}},
    "loggers": {
        "gaia": {
            "handlers": ["console"],
            "level": "DEBUG" if (GAIA_DEBUG_REQUESTS or GAIA_SHOW_PROMPTS) else "INFO",
            "propagate": False,
        },
        "django": {"handlers": ["console"], "level": "WARNING"},
    },
}
