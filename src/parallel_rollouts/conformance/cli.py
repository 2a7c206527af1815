"""The command line: ``parallel-rollouts check TARGET`` and ``parallel-rollouts advise TARGET``.

Also ``python -m parallel_rollouts ...``. TARGET is a registered env id
(``CartPole-v1``, ``ale_py:ALE/Pong-v5``) or ``module:factory`` naming a
zero-argument function that returns an env (the current directory is searched
first, as ``python -m`` does). Exit status: 0 when every check passed or only
warned, 1 when a check failed (the factory or the env raised, ran past
``--timeout``, or broke a rule; with ``--strict``, also when a check warned) or
when ``advise`` could not measure an option (it then recommends none), 2
for a target that cannot be resolved (a module that cannot be imported, a name
it lacks or that is not callable, an unregistered id, a factory that returns no
env), for a ``--policy`` that names no policy (the same, or a factory that
takes arguments, raises or returns something not callable) or an argument that
is not valid, 130 when interrupted with Ctrl-C. ``advise --policy
module:factory`` times the policy that factory returns (without it, random
actions, and the advice says so). ``parallel-rollouts --version`` prints the
installed version and, on a second line, whether its compiled core was compiled
by the install or reused from an earlier build, and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import sys
from collections.abc import Sequence

from ..core.build_record import build_summary
from ..errors import ConfigurationError
from .modes import QUICK, THOROUGH
from .report import counted

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: The envs ``advise`` times when ``--num-envs`` is not given (and the env is not a vector env).
DEFAULT_NUM_ENVS = 8


def _installed_version() -> str:
    # The installed distribution's version: `parallel_rollouts.__version__` (the one place it is
    # written) with the commit the build was made from; read from the metadata because this floor
    # may not import the root. An editable install runs the source as it is now, which may have
    # moved on from the commit it was installed at: say so, so that a bug report is not misled.
    try:
        distribution = importlib.metadata.distribution("parallel-rollouts")
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown: the package is not installed)"
    version = distribution.version
    try:
        editable = json.loads(distribution.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable")
    except ValueError:
        editable = False
    return f"{version} (editable install)" if editable else version


class _PrintVersion(argparse.Action):
    """``--version``: the build, then how its compiled core was made, each on its own line (argparse's
    own version action would run them together into one paragraph)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS,
            help="show the installed version and whether its compiled core was compiled or reused, and exit",
        )

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"{parser.prog} {_installed_version()}\n{build_summary()}", flush=True)
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parallel-rollouts",
        description="Check that an env meets what parallel collection relies on, and time the backends for it.",
    )
    parser.add_argument("--version", action=_PrintVersion)
    commands = parser.add_subparsers(dest="command", required=True)
    target_help = "a registered env id (CartPole-v1, ale_py:ALE/Pong-v5) or module:factory"

    check = commands.add_parser("check", help="run the conformance checks; exit 1 if one fails",
                                description="Run the conformance checks on TARGET; exit 1 if one fails.")
    check.add_argument("target", help=target_help)
    check.add_argument("--seed", type=int, default=0, help="reset seed of every run (default: %(default)s)")
    check.add_argument("--max-steps", type=int, default=1000, help="steps per run at most (default: %(default)s)")
    check.add_argument("--episodes", type=int, default=2, help="episodes that end per run (default: %(default)s)")
    check.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                       help="seconds each check may run the env in this process (default: %(default)g)")
    check.add_argument("--spawn-timeout", type=float, default=120.0, metavar="SECONDS",
                       help="seconds the freshly spawned process may take to build and run the env "
                            "(default: %(default)g)")
    check.add_argument("--strict", action="store_true",
                       help="exit 1 when a check warned, too (default: off)")
    check.add_argument("--advise", action="store_true",
                       help="then run the backend advisor, with the options below (default: off)")
    _add_common(check)
    _add_advice_options(check)

    advise = commands.add_parser("advise", help="time sync, async and rollout workers; recommend one",
                                 description="Time sync, async and rollout workers on TARGET; recommend one.")
    advise.add_argument("target", help=target_help)
    _add_common(advise)
    _add_advice_options(advise)
    return parser


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true",
                        help="no progress lines on stderr (default: off)")
    parser.add_argument("--env-kwargs", type=json.loads, default=None, metavar="JSON",
                        help='gymnasium.make keyword arguments for an env id, e.g. \'{"max_episode_steps": 200}\' '
                             "(default: none)")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON to PATH (default: not written)")


def _add_advice_options(parser: argparse.ArgumentParser) -> None:
    quick, thorough = QUICK, THOROUGH
    parser.add_argument("--num-envs", type=int, default=None,
                        help=f"envs your training runs (default: {DEFAULT_NUM_ENVS}; a vector env's own count)")
    parser.add_argument("--horizon", type=int, default=128, help="steps per collect() (default: %(default)s)")
    parser.add_argument("--policy", metavar="MODULE:FACTORY", default=None,
                        help="time your policy: a zero-argument function in an importable module that returns "
                             "it, called once (default: none, random actions, and the advice says so)")
    parser.add_argument("--thorough", action="store_true",
                        help=f"{thorough['rounds']} rounds of ~{thorough['trial_seconds']:g} s per option and more "
                             f"options (default: off, the ~1 minute quick mode: {quick['rounds']} rounds of "
                             f"~{quick['trial_seconds']:g} s)")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"override the number of rounds (default: {quick['rounds']}, "
                             f"{thorough['rounds']} with --thorough)")
    parser.add_argument("--trial-seconds", type=float, default=None, metavar="SECONDS",
                        help=f"override the seconds per option per round (default: {quick['trial_seconds']:g}, "
                             f"{thorough['trial_seconds']:g} with --thorough)")


def _advise(arguments: argparse.Namespace) -> tuple[dict, bool]:
    """Run the advisor and print its table; return its data and whether it could recommend."""
    from .advisor import advise

    advice = advise(
        arguments.target,
        arguments.num_envs,
        policy=arguments.policy,
        horizon=arguments.horizon,
        thorough=arguments.thorough,
        rounds=arguments.rounds,
        trial_seconds=arguments.trial_seconds,
        env_kwargs=arguments.env_kwargs,
        default_num_envs=DEFAULT_NUM_ENVS,
    )
    print(advice, flush=True)
    return advice.to_dict(), advice.recommended is not None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    if arguments.quiet:
        return _main(arguments)
    # The library's progress lines (each check as it starts, each option and round timed, envs
    # made) on stderr, the results on stdout.
    logger = logging.getLogger("parallel_rollouts")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("parallel-rollouts: %(message)s"))
    handler.setLevel(logging.INFO)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        return _main(arguments)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _main(arguments: argparse.Namespace) -> int:
    # As `python -m` does, so that `module:factory` finds a module in the current directory.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    output: dict = {}
    status = EXIT_OK
    try:
        if arguments.command == "check":
            from .check import check_env

            report = check_env(
                arguments.target,
                seed=arguments.seed,
                max_steps=arguments.max_steps,
                episodes=arguments.episodes,
                timeout=arguments.timeout,
                spawn_timeout=arguments.spawn_timeout,
                env_kwargs=arguments.env_kwargs,
            )
            print(report, flush=True)
            output["check"] = report.to_dict()
            status = EXIT_OK if report.ok else EXIT_FAILED
            if arguments.strict and report.warnings:
                names = ", ".join(repr(result.name) for result in report.warnings)
                print(f"parallel-rollouts: --strict: {counted(len(report.warnings), 'check')} warned ({names}), so the "
                      "check fails; fix them, or run without --strict to accept warnings.", file=sys.stderr)
                status = EXIT_FAILED
            if arguments.advise:
                print(flush=True)
                output["advice"], recommended = _advise(arguments)
                status = status if recommended else EXIT_FAILED
        else:
            output["advice"], recommended = _advise(arguments)
            status = EXIT_OK if recommended else EXIT_FAILED
    except ConfigurationError as error:
        print(f"parallel-rollouts: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("parallel-rollouts: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if arguments.json:
        with open(arguments.json, "w", encoding="utf-8") as file:
            json.dump(output, file, indent=2)
    return status
