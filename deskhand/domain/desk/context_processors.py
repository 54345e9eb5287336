from django.conf import settings
from django.http import HttpRequest


def deskhand(request: HttpRequest) -> dict[str, object]:
    """Every page says when no model key is set and a scripted provider drives the agent."""
    return {"scripted_provider": not settings.ANTHROPIC_API_KEY}
