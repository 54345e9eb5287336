"""Django's home for this app's ``manage.py`` commands (in ``commands``)."""
