"""The domain, below ``agent`` and ``approvals``: the support desk (``desk``), inbound
mail (``mail``), API keys and help-desk sources (``apikeys``), and the conventions every
command keeps (``cli``). It imports infrastructure only, never an app above it."""
