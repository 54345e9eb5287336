"""Names vulture cannot see used: Django, DBOS and pytest call them by name, or templates do.

``make check`` runs ``vulture`` with this file among its paths (``[tool.vulture]`` in
pyproject.toml); each name below counts as used wherever it is defined. Add a name
only with the reason it is reached; anything else vulture reports is dead code to delete.
Never imported or run.
"""
# ruff: noqa: B018, F821

# --- Django discovers these by name -----------------------------------------------------
_.AgentConfig  # apps.py: Django picks the AppConfig subclass of each app
_.ApprovalsConfig
_.FleetConfig
_.EngineConfig
_.DeskConfig
_.ApiConfig
_.ApiKeysConfig
_.StoreConfig
_.ready  # AppConfig.ready
_.default_auto_field  # AppConfig
_.adding  # Model._state.adding: Django reads it on save (agent.record.steplog._insert sets it)
_._result_cache  # QuerySet: a prefetched relation's rows (deskhand.domain.desk.rows.cache_related sets them)
_._prefetch_done
_.Command  # management commands: manage.py loads Command
_.help
_.requires_system_checks
_.add_arguments
_.handle
_.Meta  # model and form Meta: ordering, constraints, indexes, verbose names
_.ordering
_.constraints
_.indexes
_.verbose_name
_.verbose_name_plural
_.urlpatterns  # URLconfs
_.application  # asgi.py / wsgi.py, named in settings
_.deskhand  # deskhand.domain.desk.context_processors.deskhand, named in settings TEMPLATES
_.migrate_system_schema  # called from agent/migrations/0003_dbos_schema.py (not scanned)

# --- the console's templates read these (deskhand/web/console/) -------------------------------
_.stop_words  # {% load console_words %} filters
_.tool_words
_.arg_words
_.duration_words
_.cents_words
_.run_status_words
_.moment_words
_.audit_words
_.in_units  # a filter, and a property of the approval card read by its template
_.raw_arguments  # the card's <details> with the codes
_.proposed_summary
_.approved_summary
_.list_display_links  # ModelAdmin option (agent/admin.py)
_.short_id  # RunAdmin column, named in list_display

# --- django-ninja registers these by their decorators (deskhand/web/api/) ---------------------
_._unauthenticated  # @api.exception_handler
_._http_error
_.ticket_create  # @router.post / @router.get: the API's operations
_.ticket_list
_.ticket_message_add
_.run_list
_.run_cancel_op
_.run_steer_op
_.approval_list
_.approval_decide_op
_.order_put
# deskhand/domain/apikeys: read by the keys page and the admin, or written in SQL
_.revoked_by_name  # templates/console/keys.html
_.window_count  # deskhand.domain.apikeys.services.key_count_request's UPDATE
_.last_status  # the help-desk relay's admin list
_.pushed_at  # Order: when the store last pushed it, the admin's order list (deskhand/domain/desk/admin.py)

# settings: read by Django through django.conf.settings
_.DEBUG
_.SECRET_KEY
_.ALLOWED_HOSTS
_.INSTALLED_APPS
_.MIDDLEWARE
_.ROOT_URLCONF
_.WSGI_APPLICATION
_.ASGI_APPLICATION
_.TEMPLATES
_.DEFAULT_AUTO_FIELD
_.AUTH_PASSWORD_VALIDATORS
_.LOGIN_URL
_.LOGIN_REDIRECT_URL
_.LOGOUT_REDIRECT_URL
_.LANGUAGE_CODE
_.TIME_ZONE
_.USE_I18N
_.USE_TZ
_.STATIC_URL
_.STATICFILES_DIRS
_.SECURE_CSP
_.X_FRAME_OPTIONS
_.SECURE_CONTENT_TYPE_NOSNIFF
_.SECURE_REFERRER_POLICY
_.CSRF_COOKIE_SECURE
_.SESSION_COOKIE_SECURE
_.SESSION_COOKIE_HTTPONLY
_.SECURE_SSL_REDIRECT
_.SECURE_REDIRECT_EXEMPT
_.SECURE_HSTS_SECONDS
_.SECURE_HSTS_INCLUDE_SUBDOMAINS
_.SECURE_HSTS_PRELOAD
_.LOGGING

# admin: ModelAdmin / inline options and the callables list_display names as strings
_.list_display
_.list_filter
_.lookups  # SimpleListFilter.lookups: the admin calls it for a filter's choices
_.search_fields
_.list_select_related
_.list_per_page
_.show_full_result_count
_.date_hierarchy
_.readonly_fields
_.inlines
_.show_change_link
_.can_delete
_.max_num
_.fk_name
_.site_header
_.site_title
_.index_title
_.run_link
_.root_run_link
_.ledger_link
_.ticket_link
_.order_link
_.approval_link
_.args_hash_short
_.related

# auth views and forms
_.username  # the login form's field
_.clean_username  # Form.clean_<field>
_.form_class
_.template_name
_.redirect_authenticated_user

# model fields and choices that only the ORM, a migration or a stored value reaches
_.started_by
_.application_version
_.undone_by
_.root_run
_.sent_at
_.cancel_ledger_entry_id
_.END_TURN  # StopReason members: bounds write these values as strings
_.STEP_CAP
_.TOKEN_CAP
_.SPEND_CAP
_.DEADLINE
_.MERCHANT_DAILY_SPEND
_.PLATFORM_DAILY_SPEND
_.LOOP_DETECTED
_.APPROVAL_EXPIRED
_.APPROVAL_MISMATCH
_.LEDGER_MISMATCH
_.MODEL_REFUSAL
_.RESOLVED  # TicketStatus members
_.ESCALATED

# --- templates read these (templates/console/*.html) --------------------------------------
_.time_bar
_.cost_bar
_.dom_id
_.waited_s
_.model_bar
_.tool_bar
_.wall
_.headline
_.has_more
_.exceeds_remaining
_.expires_in
_.hash_short
_.refund_count
_.over_spend
_.over_refunds

# --- standard library hooks ------------------------------------------------------------
_.do_POST  # http.server handlers (test doubles of the Anthropic API)
_.log_message

# --- test doubles ------------------------------------------------------------------------
_.idempotency_key  # tests/console/conftest.py: the fake DBOSClient.send keeps the real signature
_._get_ticket  # tests/providers/world.py dispatches tool calls to getattr(self, f"_{name}")
_._get_order
_._get_customer
_._search_kb
_._issue_refund
_._send_customer_email
_._cancel_order
_._add_internal_note
_._set_ticket_status

# --- pytest: fixtures are requested by parameter name -------------------------------------
_.pytestmark
_.pytest_plugins
_.__test__
_.seeded
_.tseeded
_.transactional_db
_.django_db_setup
_.dbos_executor
_.quiet_sends
_.no_executor

# --- kept on purpose -------------------------------------------------------------------
_.refund_precheck  # agent/run/bounds.py: the Claude issue wires it in before the gate

# --- added with the console/edge apps, the Messages-API double and the payloads ---------
_.ConsoleConfig  # apps.py: Django picks the AppConfig subclass of each app
_.EdgeConfig
_.DevtoolsConfig
_.refuse_malformed  # middleware, named in settings.MIDDLEWARE
_.content_length  # middleware, named in settings.MIDDLEWARE
_.AuditSite  # deskhand.admin_site: named as AuditAdminConfig.default_site
_.AuditAdminConfig  # named in settings.INSTALLED_APPS
_.default_site  # AdminConfig: the admin site class Django instantiates
_.DatabaseUnavailableMiddleware
_.process_exception  # Django middleware hook
_.handler500  # urls.py: Django reads it by name
_.locks_until  # edge.LoginFailure column, read in SQL by the throttle
_.locks_name_until  # edge.LoginFailure column, read in SQL by the throttle
_.sender  # signal receivers take it by keyword
_._called_from_command_line  # BaseCommand attribute the CLI base sets for Django
_.reused  # step payload fields: written from the gate's dicts, shown in the audit trail
_.mismatch
_.approved_hash
_.PASSWORD_HASHERS  # settings fixture attribute (pytest-django)
_._out  # OutputWrapper attribute the CLI tests swap
_.protocol_version  # http.server: BaseHTTPRequestHandler reads these by name
_.do_GET
_.close_connection
_.daemon_threads
_.handle_error
_.fast_passwords  # pytest fixtures requested by name
_.quiet_requests
_.no_key
_.executor_stopped

# --- added with approve-with-changes, the merchant policy and the notification outbox -----
_.executes_hash  # step payload field: written from the gate's dict, shown in the audit trail
_.decided_how  # admin list_display column, named as a string
_.created_by  # ApprovalPolicy column: who wrote the rule (the consent check reads it)
_.duration_ms  # WebhookDelivery column: the delivery log the admin shows
_.MAILERS  # settings Django's mail framework reads by name
_.DEFAULT_FROM_EMAIL
_.RefusingBackend  # a mail backend named in a test's MAILERS setting
_.send_messages  # the mail backend protocol
_.handle_DATA  # aiosmtpd handler hook, called by name
# --- added with effects outside the database (agent/effects, issue 16) -----------------
_.effect_state  # step payload field: written from settle's dict, shown in the audit trail
_.SMTP  # Merchant.mail_adapter choice, chosen in the admin or a shell
_.mechanism  # aiosmtpd's authenticator signature
# --- privacy (issue 17) ----------------------------------------------------------------
_.removed  # RedactionView: read by templates/console/run.html
_.erased_at  # Customer column: read by the run page, written by deskhand.domain.desk.customer_data
# --- the fleet ------------------------------------------------------------------------
_.stopped_at  # fleet.Worker: written by the lease's SQL on a clean stop, read in the admin/psql
_.__class__  # dbos_internals.install_queue_kick swaps DBOS's queue stop event's class in place

# --- added with the attention queue and the readable audit desk -------------------------------
_.step_cost  # admin inline column, named as a string in StepInline.fields
_.daily_spend_cap  # admin list_display columns, named as strings
_.daily_refund_ceiling
_.run_refund_ceiling
# --- rough edges (issue 14) ----------------------------------------------------------------
_.pytest_configure  # pytest hooks, called by name (tests/conftest.py: one Postgres start, the tree stays clean)
_.pytest_collection_modifyitems
_.pytest_sessionstart
_.pytest_sessionfinish
_.exitstatus
_.redirect_request  # urllib's HTTPRedirectHandler hook (the throttle test follows no redirect)

# --- added with the ticket thread and inbound mail (issue 27, phase 1) -------------------
_.MailConfig  # apps.py: Django picks the AppConfig subclass of each app
_.STAFF  # MessageKind member: a staff reply (the console's reply box, phase 2) writes it
_.primary  # SupportAddress column: one per merchant (a constraint); replies come from it
_.processed_at  # InboundEmail column: when it was decided, shown to people (admin)
# Merchant conversation settings: the reply/wait half of issue 27 reads them.
_.reply_window_seconds
_.reply_reminder
_.max_customer_messages_per_day
_.DATA_UPLOAD_MAX_MEMORY_SIZE  # settings Django reads by name
_.handle_starttag  # html.parser.HTMLParser hooks, called by name
_.handle_endtag
_.internal  # ThreadLine properties the ticket template reads
_.from_customer
_.signing_key  # tests/mail fixture requested by name
_.routed_run  # TicketMessage FK: the admin and the sweep read it by its _id
# --- the API's contract (issue 36): the document's shapes and schemathesis's hooks ----------
_.model_config  # pydantic reads it by name (deskhand/web/api/webhooks.py: the events' extra="forbid")
_.delivery_id  # deskhand/web/api/webhooks.py: a field of the events out, written by approvals.outbox
_.order_version  # deskhand/web/api/webhooks.py: refund.created's field, written by approvals.notifications
_.status_display  # deskhand.domain.desk.orders.OrderFacts: templates/console/ticket.html reads it
_.before_call  # schemathesis calls its hooks by name (tests/api/schemathesis_hooks.py)

# --- the retry policies (issue 37): DBOS reads its step options by key ----------------------
_.retries_allowed  # deskhand.infra.retry.StepRetry: the keys of dbos.StepOptions / @DBOS.step
_.interval_seconds
_.backoff_rate

# --- a store of one's own (issue 38): fields Django and the admin read by name ---------------
_.first_name  # django.contrib.auth's User: get_full_name reads them
_.last_name
_.invited_by  # Invitation: who invited and who accepted, for the audit desk (the admin)
_.accepted_by
_.clean_timezone  # MerchantSettingsForm: Form.clean_<field>, called by Django
_.clean_run_refund_ceiling
_.clean_daily_refund_ceiling
_.clean_ticket_prefix
_.approval_ttl_hours  # MerchantSettingsForm fields, declared for Django's form metaclass
_.approval_sla_hours
_.reply_window_hours
_.address_check  # Notification FK: the outbox row of a support address's routing check
_.account  # Notification FK: mail about a person's own account (a password reset)

# --- graphql-core resolves a root field by its name (tests/support/shopify_double.py) ----
_.webhookSubscriptions
_.refundCreate
_.orderCancel
_.webhookSubscriptionCreate
# --- read by the integrator's order source (deskhand/domain/store/shopify.py) -------------
_.presentment_currency  # Order: the currency the customer saw, shown beside the shop's
_.asked_facts  # ApprovalOut field: django-ninja fills it from the presenter's dict key
# --- read through ORM lookups (agent/ledger/shopify_reconciliation.py: seen_at__gte) -------
_.seen_at  # ShopifyOrder: when Deskhand last heard of the order (which orders to compare)
