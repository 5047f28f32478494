"""``airflow gpu-sched jobs list|orphans``, ``plan check``, ``quota check``: the platform commands
as an ``airflow`` subcommand group (the provider info's ``cli`` key, read by the providers
manager from Airflow 3.2 on: ``compat.PROVIDER_CLI``; on 3.1 the key is ignored and the commands
are ``airflow-gpu-sched`` only), the same commands and arguments as ``airflow-gpu-sched``
(``tools/cli.py``).

Airflow calls :func:`get_cli_commands` on every ``airflow`` invocation: it only builds the
command table; the commands import what they need when they run.

May import: tools; airflow only inside functions.
"""

from __future__ import annotations

import sys
from typing import Any, Callable


def _exit_with(func: Callable[[Any], int]) -> Callable[[Any], None]:
    def command(args: Any) -> None:
        code = func(args)
        if code:
            sys.exit(code)  # airflow's CLI ignores return values: scripts need the exit code

    command.__name__ = func.__name__.lstrip("_")
    return command


def get_cli_commands() -> list:
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand

    from airflow_gpu_sched.tools.cli import PLATFORM_COMMANDS, reported

    groups = []
    for group, (group_help, commands) in PLATFORM_COMMANDS.items():
        actions = [ActionCommand(name=name, help=help_text, func=_exit_with(reported(func)),
                                 args=[Arg(flags, **options) for flags, options in arguments])
                   for name, (func, help_text, arguments) in commands.items()]
        groups.append(GroupCommand(name=group, help=group_help, subcommands=actions))
    return [GroupCommand(name="gpu-sched", help="list and clean up Vertex AI training jobs, check plans and GPU quotas "
                                                    "(airflow-gpu-sched)",
                         subcommands=groups)]
