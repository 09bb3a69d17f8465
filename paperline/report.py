"""The results report of every method, from `results/<method>.json` (`paperline.metrics` shape):
first the claims table of all methods (each paper claim's effect with its interval, seeds and
verdict, and the count of verdicts), then per method its claims, headline figures, its full
comparison table (a row per variant, the baseline marked) and any further tables. The records are
read (and validated) once, by `read_records`, and handed to the report, the README block and the pages."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from paperline.claims import Claim, counts_text
from paperline.io import atomic_path, read_json
from paperline.metrics import MethodMetrics, Row, table_columns, validate_metrics


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: Mapping[str, Row], first_column: str = "variant", marked: str | None = None) -> str:
    """Rows as a Markdown table, columns in order of first appearance; `marked` gets "(baseline)"."""
    columns = table_columns(rows)
    lines = [f"| {first_column} | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for name, row in rows.items():
        label = f"{name} (baseline)" if name == marked else name
        lines.append(f"| {label} | " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def _claim_cells(claim: Claim) -> list[str]:
    versus = f" vs `{claim.versus}`" if claim.versus else ""
    trivial = " (trivial baseline)" if claim.trivial else ""
    better = {"higher": "higher", "lower": "lower"}[claim.direction] if claim.kind == "paired" else "exact"
    return [claim.name, _fmt(claim.claim), f"`{claim.method}`{versus}{trivial}", f"{claim.metric} ({better})",
            claim.effect_text(), str(claim.seeds), f"**{claim.verdict}**"]


def claims_table(claims_by_method: Mapping[str, list[Claim]]) -> str:
    """Every claim as a row: method, claim, comparison, metric, effect [95% t interval], seeds, verdict."""
    header = ["claim", "the paper says", "compared", "metric", "effect (method − versus) [95% CI]", "seeds",
              "verdict"]
    with_method = len(claims_by_method) > 1
    lines = ["| " + " | ".join((["method"] if with_method else []) + header) + " |",
             "|" + "---|" * (len(header) + with_method)]
    for method, claims in claims_by_method.items():
        for claim in claims:
            lines.append("| " + " | ".join(([method] if with_method else []) + _claim_cells(claim)) + " |")
    return "\n".join(lines)


def verdict_summary(claims_by_method: Mapping[str, list[Claim]]) -> str:
    """`5 shown, 2 reversed, 30 inconclusive, 4 exact (41 claims of 19 methods); ...`."""
    every = [c for claims in claims_by_method.values() for c in claims]
    counts = counts_text(every)
    shown = [m for m, cs in claims_by_method.items() if any(c.verdict == "shown" for c in cs)]
    # a method that does not beat doing nothing shows nothing, whatever else it beats
    beat_trivial = [m for m, cs in claims_by_method.items()
                    if any(c.trivial for c in cs) and all(c.verdict == "shown" for c in cs if c.trivial)]
    return (f"{counts} ({len(every)} claims of {len(claims_by_method)} methods); methods with at least one "
            f"claim shown: {len(shown)} ({', '.join(shown) or 'none'}); methods with every claim against the "
            f"trivial baseline shown: {len(beat_trivial)} ({', '.join(beat_trivial) or 'none'})")


def method_section(metrics: MethodMetrics) -> str:
    parts = [f"profile `{metrics.profile}`"]
    if metrics.primary_metric:
        better = "higher" if metrics.higher_is_better else "lower"
        parts[0] += f"; primary metric `{metrics.primary_metric}` ({better} is better)"
    if metrics.claims:
        parts.append(claims_table({metrics.method: metrics.claims}))
    if metrics.headline:
        parts.append("\n".join(f"- {k}: {_fmt(v)}" for k, v in metrics.headline.items()))
    parts.append(markdown_table(metrics.with_ratios().rows, marked=metrics.baseline))
    for title, table in metrics.tables.items():
        parts.append(f"**{title}**\n\n" + markdown_table(table, first_column=""))
    return "\n\n".join(parts)


Records = Mapping[str, MethodMetrics | None]


def read_records(results_dir: Path, methods: Mapping[str, Any]) -> dict[str, MethodMetrics | None]:
    """Each registered method's validated `results/<method>.json` (None where the method has not run)."""
    records: dict[str, MethodMetrics | None] = {}
    for name in methods:
        path = Path(results_dir) / f"{name}.json"
        records[name] = validate_metrics(read_json(path), str(path)) if path.exists() else None
    return records


README_BEGIN = "<!-- methods: written by `python -m flows report --docs` from results/*.json; do not edit -->"
README_END = "<!-- /methods -->"


def readme_methods(records: Records, methods: Mapping[str, Any]) -> str:
    """The README's methods block: the verdict count of the run, then one line per method (what it
    is, its verdicts, its page)."""
    claims = {name: m.claims for name, m in records.items() if m is not None}
    every = [c for cs in claims.values() for c in cs]
    lines = [README_BEGIN, f"Verdicts of the committed `make run` (smoke): {counts_text(every)} "
             f"({len(every)} claims; the lists in `reports/results.md`).", "",
             "| method | verdicts (smoke) |", "| --- | --- |"]
    for name, spec in methods.items():
        title = spec if isinstance(spec, str) else spec.title
        short = title.split(":")[0] if ":" in title else title  # the method's name; the page says the rest
        record = records[name]
        verdicts = "not run yet" if record is None else counts_text(record.claims)
        lines.append(f"| [{_fmt(short)}](docs/methods/{name}.md) | {verdicts} |")
    return "\n".join(lines + [README_END])


def update_readme(readme: Path, block: str) -> str:
    """README with the text between README_BEGIN and README_END replaced by `block` (written atomically)."""
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        raise ValueError(f"{readme}: no methods block ({README_BEGIN!r} ... {README_END!r})")
    head, rest = text.split(README_BEGIN, 1)
    tail = rest.split(README_END, 1)[1]
    new = head + block + tail
    with atomic_path(readme) as tmp:
        tmp.write_text(new)
    return new


PAGE_BEGIN = "<!-- claims: written by `python -m flows report --docs` from results/<method>.json; do not edit -->"
PAGE_END = "<!-- /claims -->"


def page_claims(metrics: MethodMetrics | None) -> str:
    """A method page's claims block: the run's verdicts, its claims table and the figure's link."""
    if metrics is None:
        body = "_not run yet_"
    else:
        figure = method_figure(Path("reports"), metrics.method).as_posix()
        rows = (f"\n\n![{metrics.method}'s paired claims: effect and 95% interval, coloured by verdict](../../{figure})"
                if drawn(metrics.claims) else "")
        body = (f"Verdicts of the committed `make run` ({metrics.profile}): {counts_text(metrics.claims)}. "
                "Every claim of every method: "
                f"[reports/results.md](../../reports/results.md) and its figure "
                f"[reports/verdicts.png](../../reports/verdicts.png).{rows}\n\n"
                + claims_table({metrics.method: metrics.claims}))
    return f"{PAGE_BEGIN}\n{body}\n{PAGE_END}"


def update_page(page: Path, block: str) -> str:
    """The page with its claims block replaced by `block`, or inserted under its `## Claims` heading
    (at the end where it has none); written atomically."""
    text = page.read_text()
    if PAGE_BEGIN in text and PAGE_END in text:
        head, rest = text.split(PAGE_BEGIN, 1)
        new = head + block + rest.split(PAGE_END, 1)[1]
    elif "\n## Claims\n" in text:
        head, rest = text.split("\n## Claims\n", 1)
        new = head + "\n## Claims\n\n" + block + "\n" + rest
    else:
        new = text.rstrip("\n") + "\n\n## Claims\n\n" + block + "\n"
    with atomic_path(page) as tmp:
        tmp.write_text(new)
    return new


def write_report(records: Records, out_path: Path, methods: Mapping[str, Any]) -> str:
    """Write the Markdown report of every registered method (`read_records`) and return it."""
    claims = {name: m.claims for name, m in records.items() if m is not None}
    parts = ["# paperline results", "",
             "Generated by `python -m flows report` (the `report` stage of `dvc repro`) from "
             "`results/*.json`.", "",
             "## Claims", "",
             "Each paper claim as the run measured it: the effect is the mean over seeds of the paired "
             "difference method − versus, with a 95% Student-t interval; `shown` needs at least 3 seeds "
             "and an interval that excludes zero in the paper's direction, `reversed` the other way, "
             "anything else is `inconclusive`; `exact` is a deterministic identity checked to its "
             "tolerance (`paperline/claims.py`).", "",
             f"Verdicts: {verdict_summary(claims)}.", "",
             "![every paired claim: effect and 95% interval, coloured by verdict](verdicts.png)", "",
             claims_table(claims), ""]
    for name, spec in methods.items():
        parts.append(f"## {name}: {spec if isinstance(spec, str) else spec.title}")
        record = records[name]
        parts += ["", "_not run yet_" if record is None else method_section(record), ""]
    text = "\n".join(parts)
    reports = Path(out_path).parent
    write_verdicts_figure(claims, reports / "verdicts.png")
    for name in methods:  # each page embeds its own rows; a method with none drawn has no figure
        if drawn(claims.get(name, [])):
            write_verdicts_figure({name: claims[name]}, method_figure(reports, name))
        else:
            method_figure(reports, name).unlink(missing_ok=True)
    with atomic_path(out_path) as tmp:
        tmp.write_text(text)
    return text


VERDICT_COLOURS = {"shown": "#1a9850", "reversed": "#d73027", "inconclusive": "#878787", "exact": "#4575b4",
                   "not_exact": "#f46d43"}


def relative_effect(claim: Claim) -> tuple[float, float | None, float | None] | None:
    """The effect and its interval in % of the compared variant's mean (claims in different units on
    one axis); None for an exact claim or one without a usable compared mean."""
    if claim.kind != "paired" or claim.effect is None or not claim.versus_mean:
        return None
    scale = 100.0 / abs(claim.versus_mean)
    return (claim.effect * scale, None if claim.low is None else claim.low * scale,
            None if claim.high is None else claim.high * scale)


def drawn(claims: list[Claim]) -> bool:
    """Whether the verdicts figure has a row for any of these claims (a paired one with an effect)."""
    return any(relative_effect(c) is not None for c in claims)


def method_figure(reports: Path, method: str) -> Path:
    """One method's rows of the verdicts figure (its page embeds them): reports/verdicts/<method>.png."""
    return reports / "verdicts" / f"{method}.png"


def write_verdicts_figure(claims_by_method: Mapping[str, list[Claim]], path: Path) -> Path:
    """A forest plot of every paired claim: its effect with its 95% interval in % of the compared
    variant, zero marked, coloured by verdict, grouped by method (a one-seed effect hollow, no bar)."""
    from paperline.plots import plt, save_figure

    rows = [(method, c, rel) for method, claims in claims_by_method.items() for c in claims
            if (rel := relative_effect(c)) is not None]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.28 * max(len(rows), 1)))
    for y, (method, claim, (effect, low, high)) in enumerate(reversed(rows)):
        colour = VERDICT_COLOURS[claim.verdict]
        if low is not None:
            assert high is not None  # a claim's interval has both bounds or neither (Claim checks)
            ax.plot([low, high], [y, y], color=colour, lw=2)
        ax.plot([effect], [y], "o", color=colour, mfc=colour if low is not None else "white")
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{m}: {c.name}" for m, c, _ in reversed(rows)], fontsize=7)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("effect (method − versus) in % of the compared variant's mean, 95% t interval")
    for verdict, colour in VERDICT_COLOURS.items():
        ax.plot([], [], "o", color=colour, label=verdict)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    whose = f"{next(iter(claims_by_method))}'s paired claims" if len(claims_by_method) == 1 else "Every paired claim"
    ax.set_title(f"{whose} of the run (exact identities are in the claims table)")
    return save_figure(fig, path)
