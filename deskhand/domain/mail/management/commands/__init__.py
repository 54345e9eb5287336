"""The inbound SMTP receiver command (``manage.py mail_receiver``)."""
