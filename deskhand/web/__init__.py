"""The web, the top layer: the console (``console``), the JSON API (``api``) and the
mail services' inbound webhooks (``inbound``). Thin views over the apps' services
and selectors; nothing imports the web but the project's urls."""
