"""`skyrl`: the command-line entry point. One module per command; heavy imports stay inside them."""

from __future__ import annotations

import io
import os
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Annotated, Any

import typer
import typer.core

try:  # Typer >= 0.26 carries its own copy of Click
    from typer._click.core import Context, Parameter
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover - older Typer runs on Click itself
    from click import Context, Parameter  # type: ignore[assignment]
    from click.exceptions import ClickException, UsageError  # type: ignore[assignment]

from agents.engines import sleeping_threads

# before any command imports torch, whose OpenMP reads it once (agents/engines.py: OMP_WAIT)
os.environ.update(sleeping_threads())

from skyrl_cli import envs as envs_cmd  # noqa: E402 - after the wait policy is set
from skyrl_cli import eval as eval_cmd
from skyrl_cli import init as init_cmd
from skyrl_cli import runs as runs_cmd
from skyrl_cli import serve as serve_cmd
from skyrl_cli import train as train_cmd
from skyrl_cli import watch as watch_cmd
from skyrl_cli.errors import close_live

app = typer.Typer(
    name="skyrl",
    help="""Train LLM agents with reinforcement learning on your own hardware.

\b
Examples:
  skyrl init my-agent                   # scaffold a project
  skyrl train --env sql                 # DAPO on the bundled SQL tasks (~20-28 min on 2 cores)
  skyrl train --env math --model tiny --max-steps 5
  skyrl train --resume runs/<id>        # continue after Ctrl-C, a crash or kill -9
  skyrl runs                            # list runs and their state
  skyrl envs                            # environments and their action grammar
  skyrl eval --env math --model runs/<id>          # accuracy, pass@k of a trained model
  skyrl eval --suite swe-bench-mini --agent gold   # SWE-bench-style resolved rate
""",
    add_completion=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        try:
            print(f"skyrl {package_version('skyrl')}")
        except PackageNotFoundError:  # a source tree that was never installed
            print("skyrl (not installed)")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    if ctx.invoked_subcommand is None:  # bare `skyrl`: the help, and no error
        typer.echo(ctx.get_help())
        raise typer.Exit()


class _EnvHelp(typer.core.TyperCommand):
    """A command whose `--env` help names the registry's built-ins, read from its table when
    the help is shown: the registry imports gymnasium, which starting `skyrl` does not need."""

    def format_help(self, ctx: Context, formatter: Any) -> None:
        from environments.registry import BUILTINS

        names = f" Built-ins: {', '.join(BUILTINS)}."
        for param in self.params:
            if isinstance(param, typer.core.TyperOption) and param.name == "env" and param.help:
                param.help = param.help.removesuffix(names) + names
        super().format_help(ctx, formatter)


app.command("init", cls=_EnvHelp)(init_cmd.init)
app.command("train", cls=_EnvHelp)(train_cmd.train)
app.command("runs")(runs_cmd.runs)
app.command("envs")(envs_cmd.envs)
app.command("watch")(watch_cmd.watch)
app.command("eval", cls=_EnvHelp)(eval_cmd.eval_)
app.command("serve")(serve_cmd.serve)

# Help shows values the way CLIs usually do (`--model TEXT`, `init PATH`), not Typer's
# internal type labels (`<str>`, `<list[str]>`, `{path}`); a flag shows no value at all.
_LABELS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "list[str]": "TEXT"}


def _value_label(param: Parameter, ctx: Context) -> str | None:
    if param.metavar is not None:
        return param.metavar
    if getattr(param, "is_flag", False):
        return None
    label = typer.core.TyperOption.display_type(param, ctx).strip("<>")  # type: ignore[arg-type]
    return _LABELS.get(label, label.upper())


def _usage_name(param: typer.core.TyperArgument) -> str:
    name = (param.metavar or param.name or "").upper()
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


typer.core.TyperOption.display_type_rich = _value_label  # type: ignore[method-assign,assignment]
typer.core.TyperArgument.display_type_rich = _value_label  # type: ignore[method-assign,assignment]
typer.core.TyperArgument.display_name_raw = property(  # type: ignore[method-assign,assignment]
    lambda self: (self.metavar or self.name or "").upper()
)
typer.core.TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign,assignment]


def main() -> None:
    """Run the app; usage errors read like every other error: one `error:` line, exit 2."""
    # Into a pipe or a log, each line as it is printed (a long eval's per-task lines, a
    # train's summary), not in blocks of 8 KiB at exit: whoever tails the log sees it now.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    if os.environ.get("NO_COLOR"):  # no-color.org: no colour; we drop bold and dim as well
        from typer import rich_utils

        rich_utils.COLOR_SYSTEM = None
    try:
        code = app(standalone_mode=False)
    except UsageError as e:
        command = e.ctx.command_path if e.ctx is not None else "skyrl"
        message = e.format_message().rstrip(".")
        print(f"error: {message} (see {command} --help)", file=sys.stderr)
        sys.exit(2)
    except ClickException as e:
        print(f"error: {e.format_message()}", file=sys.stderr)
        sys.exit(e.exit_code)
    except typer.Abort:  # Ctrl-C outside a command's own handling
        print(file=sys.stderr)
        sys.exit(130)
    finally:
        close_live()  # whatever ended the command, the shell prompt starts on its own line
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
