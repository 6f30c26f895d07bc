"""`skyrl`: the command-line entry point. One module per command; heavy imports stay inside them."""

from __future__ import annotations

import typer

from skyrl_cli import envs as envs_cmd
from skyrl_cli import eval as eval_cmd
from skyrl_cli import init as init_cmd
from skyrl_cli import runs as runs_cmd
from skyrl_cli import train as train_cmd
from skyrl_cli import watch as watch_cmd

app = typer.Typer(
    name="skyrl",
    help="""Train LLM agents with reinforcement learning on your own hardware.

\b
Examples:
  skyrl init my-agent                   # scaffold a project
  skyrl train --env sql                 # GRPO on the bundled SQL tasks (~20 min on a CPU)
  skyrl train --env math --model tiny --max-steps 5
  skyrl train --resume runs/<id>        # continue after Ctrl-C, a crash or kill -9
  skyrl runs                            # list runs and their state
  skyrl envs                            # environments and their action grammar
  skyrl eval --env math --model runs/<id>          # accuracy, pass@k of a trained model
  skyrl eval --suite swe-bench-mini --agent gold   # SWE-bench-style resolved rate
""",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("init")(init_cmd.init)
app.command("train")(train_cmd.train)
app.command("runs")(runs_cmd.runs)
app.command("envs")(envs_cmd.envs)
app.command("watch")(watch_cmd.watch)
app.command("eval")(eval_cmd.eval_)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
