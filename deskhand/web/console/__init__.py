"""The support console: thin views over services and selectors, live from the step log."""
