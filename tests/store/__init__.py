"""Store platforms: Shopify's double, its client, money from decimal strings, sealed secrets."""
