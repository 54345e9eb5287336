"""The conventions every Deskhand management command keeps, in one base class.

- An error is one sentence: ``CommandError: <sentence>`` on stderr and a non-zero
  exit; never a traceback, never argparse's usage block.
- With ``--json`` anywhere on the command line, an error is instead one JSON
  object on stdout, ``{"error": "<sentence>", "code": "<slug>"}``, with the same
  non-zero exit, so a script reads errors the way it reads results.
- A database that is down or restarting is one sentence saying what was not
  done (``not_done``), not a ``psycopg.OperationalError`` traceback.

Codes: ``usage`` (the command line itself), ``not_found``, ``not_allowed``,
``refused`` (the rules said no), ``invalid`` (a malformed value),
``database_unavailable``, and ``error`` for anything else.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, handle_default_options
from django.db import connections

from deskhand.domain.desk.permissions import NotAllowed, NotVisible
from deskhand.infra.edge.errors import (
    database_detail,
    is_database_unavailable,
    is_database_unmigrated,
)


class CliError(CommandError):
    """A CommandError that names its kind (``code``) for ``--json`` callers."""

    def __init__(self, message: str, code: str = "error", returncode: int = 1) -> None:
        super().__init__(message, returncode=returncode)
        self.code = code


class UsageError(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="usage", returncode=2)


def error_code(exc: CommandError) -> str:
    """The slug for ``exc``: its own, or the kind of the domain error it was raised from."""
    if isinstance(exc, CliError):
        return exc.code
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, NotVisible):
        return "not_found"
    if isinstance(cause, NotAllowed):
        return "not_allowed"
    if cause is not None and type(cause).__name__.endswith("Refused"):
        return "refused"
    return "error"


def sentence(text: str) -> str:
    text = " ".join(str(text).split())
    return text if text.endswith((".", "?", "!")) else f"{text}."


class DeskhandCommand(BaseCommand):
    """BaseCommand with one-sentence errors, ``--json`` errors and database outages handled."""

    #: What a database outage leaves undone, as a clause: "The database is not reachable
    #: (…), so <not_done>." A command may update it as it goes (e.g. once a run is started).
    not_done = "nothing was done"

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        parser = super().create_parser(prog_name, subcommand, **kwargs)

        def one_sentence(message: str) -> NoReturn:
            # argparse would print its whole usage block; one sentence says what was wrong.
            raise UsageError(f"{' '.join(message.split())} (see --help).")

        parser.error = one_sentence  # type: ignore[method-assign]
        return parser

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except CommandError:
            raise
        except Exception as exc:
            if is_database_unmigrated(exc):
                raise CliError(
                    f"The database has no Deskhand tables ({database_detail(exc)}): run"
                    f" `python manage.py migrate` first, so {self.not_done}.",
                    code="database_not_migrated",
                ) from None
            if not is_database_unavailable(exc):
                raise
            raise CliError(
                f"The database is not reachable ({database_detail(exc)}), so {self.not_done}.",
                code="database_unavailable",
            ) from None

    def run_from_argv(self, argv: list[str]) -> None:
        self._called_from_command_line = True
        as_json = "--json" in argv[2:]
        traceback = "--traceback" in argv[2:]
        try:
            parser = self.create_parser(argv[0], argv[1])
            options = parser.parse_args(argv[2:])
            cmd_options = vars(options)
            args = cmd_options.pop("args", ())
            handle_default_options(options)
            self.execute(*args, **cmd_options)
        except CommandError as exc:
            if traceback:
                raise
            self.report(exc, as_json)
            sys.exit(exc.returncode or 1)
        finally:
            # Closing a connection to a server that went away must not add a traceback.
            with contextlib.suppress(Exception):
                connections.close_all()

    def report(self, exc: CommandError, as_json: bool) -> None:
        message = sentence(str(exc))
        if as_json:
            self.stdout.write(json.dumps({"error": message, "code": error_code(exc)}))
        else:
            self.stderr.write(f"CommandError: {message}")
