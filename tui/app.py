"""`skyrl watch`: a Textual UI over run directories, reading only their files.

Screens: the runs list, one run (header, reward chart, rollouts table), one trajectory,
the resolved config, and a key help. Every screen that shows live data polls its reader
once a second; the reader reads only what changed, and a screen redraws once per poll
however many steps or rollout files arrived in between (bursts collapse).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Static

from tui.chart import LineChart
from tui.reader import (
    RunReader,
    async_lines,
    eval_line,
    last_assistant_text,
    list_runs,
    read_evals,
    terminal_safe,
)
from tui.summary import fmt, fmt_duration, shorten
from tui.trajectory import TrajectoryScreen

POLL_S = 1.0
MAX_ROWS = 500
"""Rollout rows shown at once (the most recent matches); the reader keeps more."""

STATE_STYLE = {
    "running": "green",
    "finished": "blue",
    "failed": "red",
    "stale": "yellow",
    "stopped": "yellow",
}

HELP = """\
[b]skyrl watch[/b] keys

  [b]Enter[/b]    open the selected run / rollout
  [b]Esc[/b]      back
  [b]/[/b]        filter rollouts (task, stop reason, error, answer;
           [b]task:ID[/b] matches one task exactly)
  [b]z[/b]        only rollouts with reward 0
  [b]x[/b]        only failed rollouts (with an error)
  [b]g[/b]        next chart: reward, response length, KL, entropy, loss
  [b]s[/b]        sort rollouts by the next column (click a header too)
  [b]r[/b]        reverse the sort
  [b]f[/b]        follow: keep the newest rollout selected
  [b]c[/b]        the run's resolved config
  [b]?[/b]        this help
  [b]q[/b]        quit

Data refreshes every second from the run directory."""


def styled_state(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


class HelpScreen(ModalScreen[None]):
    """The key list; any of Esc, ? or q closes it."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")


class RunsScreen(Screen[None]):
    """Every run under the runs dir; Enter opens one."""

    BINDINGS = [Binding("enter", "open", "open", show=False)]

    def __init__(self, runs_dir: Path) -> None:
        super().__init__()
        self.runs_dir = runs_dir
        self.paths: list[Path] = []

    def compose(self) -> ComposeResult:
        yield Static(f"runs in {self.runs_dir}/", id="title")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static(
            f"No runs in {self.runs_dir}/ yet. Start one with:  skyrl train --env sql",
            id="empty",
        )
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        table.add_columns("id", "env", "model", "state", "step", "reward")
        self.poll()
        self.set_interval(POLL_S, self.poll)

    def poll(self) -> None:
        runs = list(reversed(list_runs(self.runs_dir)))  # newest first
        table = self.query_one("#runs", DataTable)
        cursor = table.cursor_row
        table.clear()
        for r in runs:
            reward = "-" if r.last_reward is None else f"{r.last_reward:+.3f}"
            table.add_row(
                r.id,
                r.env,
                r.model,
                styled_state(r.state),
                f"{r.step}/{r.max_steps or '?'}",
                reward,
            )
        self.paths = [r.path for r in runs]
        if runs:
            table.move_cursor(row=min(cursor, len(runs) - 1))
        table.display = bool(runs)
        self.query_one("#empty").display = not runs

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.open_row(event.cursor_row)

    def action_open(self) -> None:
        self.open_row(self.query_one("#runs", DataTable).cursor_row)

    def open_row(self, row: int) -> None:
        if 0 <= row < len(self.paths):
            self.app.push_screen(RunScreen(self.paths[row]))


ROLLOUT_COLUMNS = ("step", "task", "reward", "turns", "length", "stop", "error")
_SORT_KEYS = {
    "step": lambda t: t.get("step") or 0,
    "task": lambda t: str(t.get("task_id", "")),
    "reward": lambda t: float(t.get("reward") or 0.0),
    "turns": lambda t: t.get("num_turns") or 0,
    "length": lambda t: t.get("response_len") or 0,
    "stop": lambda t: str(t.get("stop_reason", "")),
    "error": lambda t: str(t.get("error") or ""),
}


CHARTS: tuple[tuple[str, tuple[str, str] | None], ...] = (
    ("reward/mean", ("reward/min", "reward/max")),
    ("response_len/mean", None),
    ("kl", None),
    ("entropy", None),
    ("loss", None),
)
"""The series `g` cycles through, each with the metrics of its min..max band, if any."""

ZERO_EPS = 1e-9
"""|reward| below this counts as zero for the `z` filter."""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def matches(traj: dict[str, Any], needle: str) -> bool:
    """`task:ID` matches that task id exactly; anything else is a case-insensitive
    substring match on task, stop reason, error and final answer."""
    if not needle:
        return True
    if needle.startswith("task:"):
        return str(traj.get("task_id", "")) == needle.removeprefix("task:").strip()
    hay = (
        " ".join(str(traj.get(k) or "") for k in ("task_id", "stop_reason", "error"))
        + " "
        + last_assistant_text(traj)
    )
    return needle.lower() in hay.lower()


NO_SIGNAL = "\nno learning signal: most groups give all samples one reward (advantages 0)"
"""Header line while `RunReader.no_learning_signal` holds."""


class RunScreen(Screen[None]):
    """One run: header, reward chart, filterable and sortable rollouts table."""

    BINDINGS = [
        Binding("escape", "back", "back"),
        Binding("c", "config", "config"),
        Binding("f", "follow", "follow"),
        Binding("slash", "filter", "filter"),
        Binding("s", "sort", "sort"),
        Binding("r", "reverse", "reverse", show=False),
        Binding("g", "next_chart", "chart"),
        Binding("z", "zero_reward", "reward=0", show=False),
        Binding("x", "failed_only", "failed", show=False),
    ]

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.reader = RunReader(path)
        self.follow = True
        self.sort_by = "step"
        self.sort_reverse = False
        self.shown: list[dict[str, Any]] = []
        self.chart_index = 0
        """Which of `CHARTS` is drawn."""
        self.zero_only = False
        """`z`: only rollouts whose reward is 0."""
        self.failed_only = False
        """`x`: only rollouts that failed (`error` set)."""

    def compose(self) -> ComposeResult:
        yield Static(id="run-header")
        yield LineChart("reward/mean", id="chart")
        yield Input(placeholder="/ filter: task, stop reason, error, answer", id="filter")
        yield Static(id="rollouts-status")
        yield DataTable(id="rollouts", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#rollouts", DataTable)
        for name in ROLLOUT_COLUMNS:
            table.add_column(name + "  ", key=name)  # room for the sort arrow
        self.redraw()
        table.focus()
        self.set_interval(POLL_S, self.poll)

    def poll(self) -> None:
        if self.reader.refresh():
            self.redraw()
        else:
            self.draw_header()  # elapsed time and staleness move on their own

    # -- drawing -------------------------------------------------------------------------

    def redraw(self) -> None:
        self.draw_header()
        self.draw_chart()
        self.draw_rollouts()

    def draw_chart(self) -> None:
        key, band = CHARTS[self.chart_index]
        values: list[float] = []
        lows_highs: list[tuple[float, float]] = []
        for m in self.reader.metrics:
            v = _num(m.get(key))
            if v is None:
                continue
            values.append(v)
            if band:
                lo, hi = _num(m.get(band[0])), _num(m.get(band[1]))
                lows_highs.append((v if lo is None else lo, v if hi is None else hi))
        chart = self.query_one(LineChart)
        chart.title = key
        chart.band = lows_highs
        chart.marks, chart.mark_label = self.eval_marks() if key == "reward/mean" else ([], "")
        chart.values = values

    def eval_marks(self) -> tuple[list[tuple[float, float]], str]:
        """The evaluations recorded during training (warm-up/before at step 0, `eval.every`,
        after) as points over the reward chart: (position along the steps, accuracy)."""
        steps = [m["step"] for m in self.reader.metrics if isinstance(m.get("step"), int)]
        evals = [e for e in read_evals(self.reader.path) if isinstance(e.get("step"), int)]
        if not steps or not evals:
            return [], ""
        first, last = min(steps), max(steps)
        span = max(1, last - first)
        marks = [(min(1.0, max(0.0, (e["step"] - first) / span)), e["accuracy"]) for e in evals]
        return marks, f"{evals[-1].get('split', 'eval')} accuracy " + eval_line(evals[-1]).split(
            " ", 1
        )[1]

    def draw_header(self) -> None:
        r = self.reader
        m = r.last_metrics
        state = r.state
        text = Text.assemble(
            (terminal_safe(r.path.name), "bold"),
            "  ",
            styled_state(state),
            f"  step {r.step}/{r.max_steps or '?'}",
            f"  elapsed {fmt_duration(r.elapsed())}",
        )
        eta = r.eta()
        if eta is not None:
            text.append(f"  eta {fmt_duration(eta)}")
        text.append(
            f"\nreward {fmt(m.get('reward/mean'))}"
            f"  loss {fmt(m.get('loss'), '.4f')}"
            f"  entropy {fmt(m.get('entropy'))}"
            f"  {fmt(m.get('perf/episodes_per_s'), '.2f')} episodes/s"
            f"  {fmt(m.get('perf/tokens_per_s'), '.0f')} tokens/s"
        )
        if lines := async_lines(m):
            text.append("\nasync " + "  ".join(lines))
        evals = read_evals(r.path)
        if evals:
            text.append("\neval " + "  ".join(f"{e['name']}: {eval_line(e)}" for e in evals[-3:]))
        if r.no_learning_signal:
            text.append(NO_SIGNAL, style="bold yellow")
        if r.status.get("error") and state in ("failed", "stopped"):
            text.append(f"\nerror: {shorten(str(r.status['error']), 200)}", style="bold red")
        self.query_one("#run-header", Static).update(text)

    def draw_rollouts(self) -> None:
        needle = self.query_one("#filter", Input).value.strip()
        rows = [
            t
            for t in self.reader.rollouts
            if matches(t, needle)
            and (not self.zero_only or abs(_num(t.get("reward")) or 0.0) < ZERO_EPS)
            and (not self.failed_only or t.get("error"))
        ]
        total = len(rows)
        rows.sort(key=_SORT_KEYS[self.sort_by], reverse=self.sort_reverse)
        # Keep the newest end of the ordering: the most recent rows in the default order.
        rows = rows[:MAX_ROWS] if self.sort_reverse else rows[-MAX_ROWS:]
        table = self.query_one("#rollouts", DataTable)
        cursor = table.cursor_row
        table.clear()
        for t in rows:
            error = t.get("error")
            table.add_row(
                str(t.get("step", "?")),
                shorten(str(t.get("task_id", "?")), 24),
                Text(fmt(t.get("reward"), "+.3f"), justify="right"),
                str(t.get("num_turns", "?")),
                str(t.get("response_len", "?")),
                Text(str(t.get("stop_reason", "")), style="red" if error else ""),
                Text(shorten(str(error), 40), style="red") if error else "",
            )
        self.shown = rows
        for name in ROLLOUT_COLUMNS:
            arrow = (" ▼" if self.sort_reverse else " ▲") if name == self.sort_by else "  "
            table.columns[name].label = Text(name + arrow)  # type: ignore[index]
        table.refresh(layout=True)
        self.draw_status(needle, total)
        if rows:
            newest = 0 if self.sort_reverse else len(rows) - 1
            table.move_cursor(row=newest if self.follow else min(cursor, len(rows) - 1))

    def draw_status(self, needle: str, total: int) -> None:
        """The line above the table: how many rollouts match, and every active filter."""
        filters = [
            name
            for name, on in (
                ("reward=0", self.zero_only),
                ("failed", self.failed_only),
                (f"'{needle}'", bool(needle)),
            )
            if on
        ]
        text = Text(f"{total} of {len(self.reader.rollouts)} rollouts")
        if filters:
            text.append("  filters: ")
            text.append("  ".join(filters), style="bold yellow")
        if self.follow:
            text.append("  follow", style="cyan")
        self.query_one("#rollouts-status", Static).update(text)

    # -- actions -------------------------------------------------------------------------

    def on_input_changed(self, event: Input.Changed) -> None:
        self.draw_rollouts()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#rollouts", DataTable).focus()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        name = str(event.column_key.value)
        if name == self.sort_by:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_by, self.sort_reverse = name, False
        self.draw_rollouts()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if 0 <= event.cursor_row < len(self.shown):
            traj = self.shown[event.cursor_row]
            self.follow = False
            self.draw_rollouts()
            self.app.push_screen(TrajectoryScreen(traj))

    def action_back(self) -> None:
        focused = self.focused
        if isinstance(focused, Input):
            self.query_one("#rollouts", DataTable).focus()
        elif len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.switch_screen(RunsScreen(self.reader.path.parent))

    def action_config(self) -> None:
        self.app.push_screen(ConfigScreen(self.reader))

    def action_follow(self) -> None:
        self.follow = not self.follow
        self.draw_rollouts()

    def action_next_chart(self) -> None:
        self.chart_index = (self.chart_index + 1) % len(CHARTS)
        self.draw_chart()

    def action_zero_reward(self) -> None:
        self.zero_only = not self.zero_only
        self.draw_rollouts()

    def action_failed_only(self) -> None:
        self.failed_only = not self.failed_only
        self.draw_rollouts()

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_sort(self) -> None:
        i = ROLLOUT_COLUMNS.index(self.sort_by)
        self.sort_by, self.sort_reverse = ROLLOUT_COLUMNS[(i + 1) % len(ROLLOUT_COLUMNS)], False
        self.draw_rollouts()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.draw_rollouts()


class ConfigScreen(Screen[None]):
    """The run's resolved config.yaml, as written."""

    BINDINGS = [Binding("escape,c", "app.pop_screen", "back")]

    def __init__(self, reader: RunReader) -> None:
        super().__init__()
        self.reader = reader

    def compose(self) -> ComposeResult:
        path = self.reader.path / "config.yaml"
        try:
            body = path.read_text()
        except OSError as e:
            body = f"cannot read {path}: {e}"
        yield Static(f"{path}", id="title")
        with VerticalScroll():
            yield Static(Text(body), id="config")
        yield Footer()


class WatchApp(App[None]):
    """Open `run_dir` when given, else the list of runs under `runs_dir`."""

    CSS_PATH = "app.tcss"
    TITLE = "skyrl watch"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(self, runs_dir: Path = Path("runs"), run_dir: Path | None = None) -> None:
        super().__init__()
        self.runs_dir = runs_dir
        self.run_dir = run_dir
        self.started = time.time()

    def on_mount(self) -> None:
        if self.run_dir is not None:
            self.push_screen(RunScreen(self.run_dir))
        else:
            self.push_screen(RunsScreen(self.runs_dir))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())
