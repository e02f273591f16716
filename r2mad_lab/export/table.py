"""The tidy per-question table: one row per question x method x model x variant x replicate.

Each row is one question of one run (a :class:`r2mad_core.records.TranscriptRecord`): who ran it (``variant``: the
folders between ``runs/`` and the engine's, the profile or a variant's; ``model``, ``paper_model`` (the paper model it
stands in for), ``engine``), what ran (``benchmark`` and its table name ``benchmark_label``, ``split``, ``method`` (the
tables' name), ``method_name`` (the registered method), ``settings`` and ``protocol``: the settings that tell runs of
one method apart (:func:`r2mad_lab.report.run_index.settings_of`, :func:`~r2mad_lab.report.run_index.protocol_of`),
``seed``: the replicate), the question (``sample_id``, ``gold``), the outcome (``final_answer``, ``correct``, the vote's
``tied``), its cost (``rounds`` executed, ``stopped_early``, ``requests``, ``prompt_tokens``, ``completion_tokens``,
``tokens``) and ``run`` (the run's path relative to the folder holding ``runs/``). No wall time: a rerun of the same
requests gives the same bytes (the table is committed beside a profile's figures).

:func:`write_profile_table` writes ``samples.parquet`` from the cells a profile's report read
(:func:`r2mad_lab.reproduce.collect.collect_reproduction`); :func:`from_runs` builds it from run folders
(``r2mad export table``). Every paired test of the package can be redone from it in pandas (docs/elsewhere.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from r2mad_core.data.benchmarks import display_name
from r2mad_core.files import atomic_write
from r2mad_lab.report.run_index import protocol_of, settings_of

#: The table's file beside a profile's figures.
TABLE_NAME = "samples.parquet"
#: The columns, in order.
COLUMNS = ["variant", "model", "paper_model", "engine", "benchmark", "benchmark_label", "split", "method",
           "method_name",
           "settings", "protocol", "seed", "sample_id", "gold", "final_answer", "correct", "tied", "rounds",
           "stopped_early", "requests", "prompt_tokens", "completion_tokens", "tokens", "run"]
#: The row order: a rerun writes the same bytes.
ORDER = ["variant", "model", "benchmark", "method", "seed", "run", "sample_id"]


def rows(records: Iterable[Any], *, config: Any, variant: str, model: str, paper_model: str, method: str,
         run: str) -> list[dict[str, Any]]:
    """The rows of one run's ``records`` (module docstring); ``config`` its :class:`r2mad_core.records.RunConfig`."""
    options = config.method.get("options", {})
    common = {
        "variant": variant, "model": model, "paper_model": paper_model,
        "engine": str(config.engine.get("identity", "?")).split(":", 1)[0],
        "benchmark": config.benchmark, "benchmark_label": display_name(config.benchmark), "split": config.split,
        "method": method, "method_name": str(config.method.get("name")), "settings": settings_of(config),
        "protocol": protocol_of(options), "seed": int(config.seed), "run": run,
    }
    out = []
    for record in records:
        tokens = record.tokens.values()
        out.append({
            **common, "sample_id": record.sample_id, "gold": record.gold, "final_answer": record.final_answer,
            "correct": bool(record.correct), "tied": bool(record.vote.tied), "rounds": int(record.n_rounds_executed),
            "stopped_early": bool(record.stopped_early), "requests": int(sum(t.requests for t in tokens)),
            "prompt_tokens": int(sum(t.prompt_tokens for t in tokens)),
            "completion_tokens": int(sum(t.completion_tokens for t in tokens)),
            "tokens": int(sum(t.prompt_tokens + t.completion_tokens for t in tokens)),
        })
    return out


def tidy(all_rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The rows as the table: :data:`COLUMNS`, duplicates (one run read for two tables) once, sorted by
    :data:`ORDER`."""
    frame = pd.DataFrame(list(all_rows), columns=COLUMNS)
    frame = frame.drop_duplicates(["variant", "model", "method", "run", "sample_id"])
    frame = frame.sort_values(ORDER, kind="stable").reset_index(drop=True)
    types = {"seed": "int64", "correct": "bool", "tied": "bool", "rounds": "int64", "stopped_early": "bool",
             "requests": "int64", "prompt_tokens": "int64", "completion_tokens": "int64", "tokens": "int64"}
    return frame.astype(types)


def from_runs(runs: Sequence[Any]) -> pd.DataFrame:
    """The table of :class:`r2mad_lab.export.source.ExportRun` s (``r2mad export table``): methods named as the run
    index names them, the model as its engine recorded it."""
    out: list[dict[str, Any]] = []
    for run in runs:
        model = str(run.config.engine.get("model", "?"))
        out += rows(run.records, config=run.config, variant=run.entry.variant, model=model, paper_model=model,
                    method=run.entry.method, run=run.path)
    return tidy(out)


def from_outcomes(outcomes: Iterable[Any], out_dir: str | Path, variant: str) -> pd.DataFrame:
    """The table of a report's cells (:class:`r2mad_lab.report.results.CellOutcome`: the tables' method and model
    names), run paths as the manifest in ``out_dir`` names them."""
    from r2mad_lab.report.artifacts import run_paths
    from r2mad_lab.report.run_index import read_config

    out: list[dict[str, Any]] = []
    configs: dict[Path, Any] = {}
    for outcome in outcomes:
        run_dir = Path(outcome.run_dir)
        if run_dir not in configs:
            configs[run_dir] = read_config(run_dir)
        out += rows(outcome.records, config=configs[run_dir], variant=variant, model=outcome.model.label,
                    paper_model=outcome.model.paper_model or outcome.model.label, method=outcome.method,
                    run=run_paths([run_dir], out_dir)[0])
    return tidy(out)


def write(frame: pd.DataFrame, path: str | Path) -> Path:
    """``frame`` as Parquet (``.parquet``, pyarrow, no index) or CSV (``.csv``), written atomically; the same frame
    gives the same bytes."""
    path = Path(path)
    if path.suffix == ".csv":
        return atomic_write(path, frame.to_csv(index=False))
    if path.suffix != ".parquet":
        raise ValueError(f"{path}: expected a .parquet or .csv file name")
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    return atomic_write(path, lambda temporary: pq.write_table(table, temporary, compression="zstd"))


def write_profile_table(outcomes: Iterable[Any], out_dir: str | Path, variant: str = "") -> Path:
    """``out_dir/samples.parquet``: the table of every cell a profile's report read (its variant's, in a variant's
    folder; a replicate is the variant ``seed=<s>``)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write(from_outcomes(outcomes, out_dir, variant), out_dir / TABLE_NAME)
