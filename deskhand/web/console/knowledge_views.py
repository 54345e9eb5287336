"""The merchant's knowledge: the articles the agent answers from, their versions, imports.

Every member reads; owners and agents write and import (a viewer's post is a 403 naming the
rule). An article page shows the current version rendered safely and every earlier one.
Thin views over ``deskhand.domain.desk.knowledge``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_http_methods, require_safe

from approvals.models import person_name
from deskhand.domain.desk.knowledge import Draft, KbRefused, article_save, kb_html, kb_import
from deskhand.domain.desk.models import KbArticle
from deskhand.domain.desk.permissions import require_actor
from deskhand.web.console.decorators import ConsoleRequest, merchant_member, refuse


def _draft(request: ConsoleRequest) -> Draft:
    return Draft(
        title=request.POST.get("title", ""),
        source_text=request.POST.get("text", ""),
        source_format="markdown",
        published=request.POST.get("published") == "on",
    )


def _list(request: ConsoleRequest, status: int = 200, **extra: Any) -> HttpResponse:
    merchant = request.membership.merchant
    return render(
        request,
        "console/knowledge.html",
        {
            "merchant": merchant,
            "articles": KbArticle.objects.filter(merchant=merchant).order_by("title"),
            "can_write": request.membership.can_act,
            **extra,
        },
        status=status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def knowledge(request: ConsoleRequest) -> HttpResponse:
    if request.method != "POST":
        return _list(request)
    require_actor(request.user, request.membership.merchant_id, "change the knowledge base")
    merchant = request.membership.merchant
    upload = request.FILES.get("file")
    try:
        if upload is not None:
            report = kb_import(
                merchant=merchant,
                filename=upload.name or "",
                data=upload.read(),
                by_name=person_name(request.user),
            )
            return _list(request, 201, done=f"Imported: {report.sentence()}")
        article, _ = article_save(
            merchant=merchant, draft=_draft(request), by_name=person_name(request.user)
        )
    except KbRefused as exc:
        return _list(request, 400, error=str(exc))
    return redirect("console:article", slug=article.slug)


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def article(request: ConsoleRequest, slug: str) -> HttpResponse:
    found = KbArticle.objects.filter(merchant_id=request.membership.merchant_id, slug=slug).first()
    if found is None:
        return refuse(request, 404, "There is no such article, or it belongs to another merchant.")
    status, extra = 200, {}
    if request.method == "POST":
        require_actor(request.user, request.membership.merchant_id, "change the knowledge base")
        try:
            found, outcome = article_save(
                merchant=request.membership.merchant,
                draft=_draft(request),
                by_name=person_name(request.user),
                article=found,
            )
            extra["done"] = (
                "Nothing changed."
                if outcome == "unchanged"
                else f"Saved as version {found.version}."
            )
        except KbRefused as exc:
            status, extra["error"] = 400, str(exc)
    return _article_page(request, found, found.version, status, **extra)


@require_safe
@login_required
@merchant_member
def article_version(request: ConsoleRequest, slug: str, version: int) -> HttpResponse:
    found = KbArticle.objects.filter(merchant_id=request.membership.merchant_id, slug=slug).first()
    if found is None or not found.versions.filter(version=version).exists():
        return refuse(request, 404, "There is no such article version.")
    return _article_page(request, found, version)


def _article_page(
    request: ConsoleRequest, found: KbArticle, version: int, status: int = 200, **extra: Any
) -> HttpResponse:
    shown = found.versions.get(version=version)
    current = found.versions.get(version=found.version)
    return render(
        request,
        "console/article.html",
        {
            "article": found,
            "shown": shown,
            # Sanitised by nh3 (deskhand.domain.desk.knowledge.kb_html): no script, style or image.
            "html": mark_safe(kb_html(shown.source_text, shown.source_format)),
            "versions": found.versions.order_by("-version"),
            "editable": request.membership.can_act and current.source_format == "markdown",
            "current": current,
            **extra,
        },
        status=status,
    )
