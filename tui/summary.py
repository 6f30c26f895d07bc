"""The plain-text one-screen summary of a run, printed by `skyrl watch --once`."""

from __future__ import annotations

from typing import Any

from tui.reader import (
    RunReader,
    async_lines,
    eval_line,
    last_assistant_text,
    read_evals,
    terminal_safe,
)


def shorten(text: str, width: int) -> str:
    """One line of at most `width` characters, whitespace collapsed, `…` when cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def fmt(value: Any, spec: str = ".3f") -> str:
    """A number formatted with `spec`, or `-` when missing."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return format(value, spec)


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def best_and_worst(reader: RunReader, n: int = 3) -> tuple[list[dict], list[dict]]:
    """The `n` highest and lowest reward trajectories of the latest step with rollouts."""
    if not reader.rollouts:
        return [], []
    last_step = reader.rollouts[-1].get("step")
    recent = [t for t in reader.rollouts if t.get("step") == last_step]
    ranked = sorted(recent, key=lambda t: float(t.get("reward") or 0.0))
    return ranked[::-1][:n], ranked[:n]


def summary_text(reader: RunReader, width: int = 80) -> str:
    """State, progress, the last step's metrics and the best/worst recent rollouts."""
    m = reader.last_metrics
    status = reader.status
    max_steps = reader.max_steps
    lines = [
        f"run      {terminal_safe(reader.path.name)}",
        f"env      {status.get('env') or (reader.config.get('env') or {}).get('name', '?')}"
        f"   model {status.get('model') or (reader.config.get('model') or {}).get('name', '?')}",
        f"state    {reader.state}   step {reader.step}/{max_steps if max_steps else '?'}"
        f"   elapsed {fmt_duration(reader.elapsed())}",
    ]
    if status.get("error"):
        lines.append(f"error    {shorten(str(status['error']), width - 9)}")
    if reader.no_learning_signal:
        lines.append("warning  no learning signal: most groups give all samples one reward")
    lines += [
        "",
        f"last step {m.get('step', '-')}",
        f"  reward   mean {fmt(m.get('reward/mean'))}  min {fmt(m.get('reward/min'))}"
        f"  max {fmt(m.get('reward/max'))}  acc {fmt(m.get('reward/accuracy'))}",
        f"  loss     {fmt(m.get('loss'), '.4f')}   entropy {fmt(m.get('entropy'))}"
        f"   kl {fmt(m.get('kl'), '.4f')}",
        f"  speed    {fmt(m.get('perf/episodes_per_s'), '.2f')} episodes/s"
        f"   {fmt(m.get('perf/tokens_per_s'), '.0f')} tokens/s"
        f"   {fmt(m.get('time/step'), '.1f')} s/step",
    ]
    lines += [f"  {'async' if i == 0 else '':<8} {x}" for i, x in enumerate(async_lines(m))]
    evals = read_evals(reader.path)
    if evals:
        lines += ["", "evaluations (greedy unless pass@k)"]
        for rec in evals:
            lines.append(f"  {rec['name']:<24} {eval_line(rec)}   {rec.get('n', '?')} episodes")
    best, worst = best_and_worst(reader)
    for title, group in (("best", best), ("worst", worst)):
        if not group:
            continue
        lines += ["", f"{title} rollouts of step {group[0].get('step', '?')}"]
        for t in group:
            head = (
                f"  {fmt(t.get('reward'), '+.2f')}  {shorten(str(t.get('task_id', '?')), 20):<20}  "
            )
            tail = f"error: {t['error']}" if t.get("error") else last_assistant_text(t)
            lines.append(head + shorten(tail, max(10, width - len(head))))
    if not reader.rollouts:
        lines += ["", "no rollouts yet"]
    return "\n".join(lines)
