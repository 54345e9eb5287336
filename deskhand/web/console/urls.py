"""The console's URLs: paths a person can read (``/tickets/NW-1/``, ``/runs/<id>/``)."""

from __future__ import annotations

from django.urls import path

from deskhand.web.console import (
    addresses_views,
    approval_views,
    keys_views,
    knowledge_views,
    replay_views,
    search_views,
    settings_views,
    sse,
    team_views,
    views,
)

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    path("attention/", views.attention_list, name="attention"),
    path("attention/stream", sse.counts_stream, name="counts_stream"),
    path("search/", search_views.search, name="search"),
    path("tickets/", views.tickets, name="tickets"),
    path("tickets/<str:reference>/", views.ticket, name="ticket"),
    path("tickets/<str:reference>/run", views.ticket_run, name="ticket_run"),
    path("runs/", views.runs, name="runs"),
    path("runs/stream", sse.runs_stream, name="runs_stream"),
    path("runs/<uuid:run_id>/", views.run, name="run"),
    # The 8-character id every table shows is an address too (redirects to the full id).
    path("runs/<str:short>/", search_views.run_short, name="run_short"),
    path("runs/<uuid:run_id>/stream", sse.run_stream, name="run_stream"),
    path("runs/<uuid:run_id>/steps", views.run_steps, name="run_steps"),
    path("runs/<uuid:run_id>/cancel", views.run_cancel_view, name="run_cancel"),
    path("runs/<uuid:run_id>/steer", views.run_steer_view, name="run_steer"),
    path("runs/<uuid:run_id>/steps/<int:seq>/undo", views.step_undo_view, name="step_undo"),
    path("runs/<uuid:run_id>/steps/<int:seq>/sent", views.step_sent, name="step_sent"),
    path("runs/<uuid:run_id>/replay/<int:seq>/", replay_views.replay_at, name="replay_at"),
    path("runs/<uuid:run_id>/replay/<int:seq>/fork", replay_views.fork_from, name="fork_from"),
    path("approvals/", approval_views.approvals, name="approvals"),
    path(
        "approvals/<uuid:approval_id>/decide",
        approval_views.approval_decide_view,
        name="approval_decide",
    ),
    path("approvals/bulk", approval_views.approvals_bulk_view, name="approvals_bulk"),
    path("policy/", approval_views.policy, name="policy"),
    path("usage/", views.usage, name="usage"),
    path("merchant/", views.merchant, name="merchant"),
    path("merchant/keys/", keys_views.keys, name="keys"),
    path("merchant/keys/<str:prefix>/revoke", keys_views.key_revoke_view, name="key_revoke"),
    path("merchant/settings/", settings_views.merchant_settings, name="settings"),
    path("merchant/settings/shopify/", settings_views.shopify_connect, name="shopify_connect"),
    path("merchant/addresses/", addresses_views.addresses, name="addresses"),
    *(
        path(
            f"merchant/addresses/<int:pk>/{action}",
            addresses_views.address_action,
            {"action": action},
            name=f"address_{action}",
        )
        for action in ("check", "primary", "remove")
    ),
    path("merchant/team/", team_views.team, name="team"),
    path("knowledge/", knowledge_views.knowledge, name="knowledge"),
    path("knowledge/<slug:slug>/", knowledge_views.article, name="article"),
    path(
        "knowledge/<slug:slug>/v<int:version>/",
        knowledge_views.article_version,
        name="article_version",
    ),
    *(
        path(
            f"merchant/team/invitations/<int:pk>/{action}",
            team_views.invitation_action,
            {"action": action},
            name=f"invitation_{action}",
        )
        for action in ("resend", "revoke")
    ),
    path("merchant/team/members/<int:pk>/role", team_views.member_role_view, name="member_role"),
    path(
        "merchant/team/members/<int:pk>/remove", team_views.member_remove_view, name="member_remove"
    ),
    path("merchant/switch", team_views.merchant_switch, name="merchant_switch"),
]
