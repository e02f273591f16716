"""The paper run's dress rehearsal: every notebook of a GPU profile, end to end, on this CPU, in minutes.

``python -m r2mad_lab.reproduce --profile paper --rehearse`` (``make reproduce PROFILE=paper ARGS=--rehearse``):

- **The same road as the real run.** :func:`rehearsal_fields` derives the rehearsal profile from the profile's own
  fields; only :data:`REPLACED` differ: every model (the evaluated ones, the memory-only model, the API models of
  the large-model table) is a :class:`~r2mad_lab.engines.rehearsal.RehearsalEngine` with that model's Hugging Face
  id, label and context (its ``max_model_len``); ``test_limit``/``train_limit`` a few questions; the hashing embedder
  (BGE-M3 is not loaded); fewer bootstrap resamples. The profile is written as YAML and run by the same runner
  (:func:`r2mad_lab.reproduce.command.run_notebooks`: papermill, each notebook's
  :meth:`~r2mad_lab.reproduce.grid.ExperimentGrid.from_profile`).
- **Its own folders, keyed by what it rehearsed** (:func:`rehearsal_folder`): the profile with no overrides and every
  notebook in ``figures/<profile>-rehearsal/`` (never ``figures/<profile>/``); with overrides (``--protocol``,
  ``--set``) or ``--only`` where variants go, ``figures/<profile>-rehearsal/variants/<name>/`` (the name of the
  overrides plus ``notebooks=03`` for a part); ``runs/``, ``cache/`` and ``notebooks/executed/`` likewise, emptied
  first (a rehearsal counts every request: none may come from a cache; another rehearsal's folder is left alone).
- **A record of what it rehearsed** (``REHEARSAL.json``, :func:`inputs`): the profile, its overrides, the notebooks,
  whether it completed, and digests of its inputs (the rehearsal profile's fields, the notebooks' bytes, the code
  that builds the requests): ``--estimate-only`` uses only a complete rehearsal whose inputs are unchanged.
- **Labelled**: every caption names the stand-in ("REHEARSAL stand-in, not this model's answers"), every manifest
  entry gets a ``rehearsal`` record, and the folder has ``REHEARSAL.json`` (what ran, the request counts per model).
- **Every request logged** (``runs/<profile>-rehearsal/requests.jsonl``: model, tag, prompt tokens, max_tokens,
  completion tokens, cut, benchmark, split): what ``--estimate-only`` scales (:mod:`r2mad_lab.reproduce.paper.command`).
- **Fails where the real run would**: a notebook error, a profile or model entry that does not load, an artifact
  of the manifest missing, a bank not built by the memory model, and a prompt over a model's context (the real
  run would answer it empty: one line per model).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from r2mad_core.data.benchmarks import load as load_benchmark
from r2mad_core.files import atomic_write
from r2mad_lab.engines import rehearsal as stand_in
from r2mad_lab.experiments.profiles import Profile, load_profile
from r2mad_lab.report.artifacts import MANIFEST_NAME, missing_artifacts, read_manifest

SUFFIX = "-rehearsal"
TEST_LIMIT = 2
TRAIN_LIMIT = 4
BOOTSTRAP_RESAMPLES = 200
LOG_NAME = "requests.jsonl"
SUMMARY_NAME = "REHEARSAL.json"
#: The fields the rehearsal profile changes; everything else is the profile's own.
REPLACED = ("models", "memory_models", "large_models", "embedder", "test_limit", "train_limit", "bootstrap_resamples",
            "description", "expected_runtime", "expected_runtime_minutes")
#: The committed manifest whose artifact names every full run writes (the notebooks are the same for every profile).
REFERENCE_MANIFEST = Path(__file__).resolve().parents[2] / "figures" / "sim" / MANIFEST_NAME


def _questions(profile: Profile, test_limit: int, train_limit: int, data_dir: Path | None) -> dict[str, Any]:
    rule = profile.spec.choices["split_rule"]
    return {b: {"test": [s.question[:200] for s in load_benchmark(b, "test", data_dir, split_rule=rule)[:test_limit]],
                "train": [s.question[:200]
                          for s in load_benchmark(b, "train", data_dir, split_rule=rule)[:train_limit]]}
            for b in profile.spec.benchmarks}


def _entry(entry: Mapping[str, Any], questions: Mapping[str, Any]) -> dict[str, Any]:
    """A model entry of the profile as its rehearsal stand-in: same label and model id, its context."""
    options = dict(entry.get("options") or {})
    model = entry.get("model") or entry["label"]  # an API model named by an environment variable: its label
    return {"label": entry["label"], "engine": stand_in.ENGINE_NAME, "model": str(model),
            "options": {"label": entry["label"], "context": options.get("max_model_len"), "questions": questions}}


def rehearsal_fields(profile: Profile, *, test_limit: int = TEST_LIMIT, train_limit: int = TRAIN_LIMIT,
                     data_dir: Path | None = None) -> dict[str, Any]:
    """The rehearsal profile's fields: the profile's, with :data:`REPLACED` the rehearsal's (module docstring)."""
    fields = json.loads(json.dumps(dict(profile.fields)))
    questions = _questions(profile, test_limit, train_limit, data_dir)
    fields["models"] = [_entry(m, questions) for m in fields["models"]]
    if fields.get("memory_models"):
        fields["memory_models"] = [_entry(m, questions) for m in fields["memory_models"]]
    fields["large_models"] = [m if "stand_in" in m else _entry(m, questions) for m in fields.get("large_models") or []]
    fields.update(embedder="hashing", test_limit=test_limit, train_limit=train_limit,
                  bootstrap_resamples=min(BOOTSTRAP_RESAMPLES, int(fields.get("bootstrap_resamples") or 10_000)))
    fields["description"] = (f"REHEARSAL of profile {profile.name}: every model answered by the rehearsal stand-in "
                             f"(its context and reply lengths, no language model), {test_limit} test / {train_limit} "
                             f"train questions per benchmark, hashing embedder. No number here is a model's.")
    fields["expected_runtime"] = "a few minutes on a CPU (a rehearsal)"
    fields["expected_runtime_minutes"] = 10
    return fields


def rehearsal_name(profile: Profile) -> str:
    return profile.folder + SUFFIX


#: What builds the requests a rehearsal logs (relative to the repository): the inputs digest covers their bytes. The
#: report, the command lines and this sub-package do not change a request; the profile is digested by its fields.
REQUEST_CODE = ("r2mad_core", "r2mad_lab/engines", "r2mad_lab/experiments", "r2mad_lab/reproduce/grid.py",
                "r2mad_lab/reproduce/notebook_setup.py")
#: The repository's root: :data:`REQUEST_CODE` is relative to it.
CODE_ROOT = Path(__file__).resolve().parents[3]


def notebooks_key(only: Sequence[str] | None) -> str | list[str]:
    """``"all"``, or the notebooks of ``--only`` as two-digit numbers (``["03"]``)."""
    return "all" if not only else sorted({t.strip().split("_")[0].zfill(2) for t in only if t.strip()})


def rehearsal_folder(profile: Profile, only: Sequence[str] | None = None) -> str:
    """The rehearsal's folder name under ``figures/``, ``runs/``, ``cache/``: ``<profile>-rehearsal`` for every notebook
    of the profile as written; else ``<profile>-rehearsal/variants/<name>`` (its overrides, and the notebooks of a
    part)."""
    from r2mad_lab.reproduce.points import VARIANTS_DIR, variant_name  # lazy: pandas

    keyed = dict(profile.overrides)
    notebooks = notebooks_key(only)
    if notebooks != "all":
        keyed["notebooks"] = "+".join(notebooks)
    base = rehearsal_name(profile)
    return f"{base}/{VARIANTS_DIR}/{variant_name(keyed)}" if keyed else base


def _digest_files(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.as_posix().encode() + b"\0" + path.read_bytes() + b"\1")
    return digest.hexdigest()


def code_files() -> list[Path]:
    found = []
    for part in REQUEST_CODE:
        root = CODE_ROOT / part
        found += [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                       and "__pycache__" not in p.parts and p.suffix != ".pyc")
    return found


def inputs(profile: Profile, notebooks: Sequence[Path], data_dir: Path | None = None, *,
           test_limit: int = TEST_LIMIT, train_limit: int = TRAIN_LIMIT) -> dict[str, str]:
    """Digests of what a rehearsal's requests are made of: the rehearsal profile's fields, the notebooks' bytes, the
    code that builds the requests (:data:`REQUEST_CODE`). Equal digests: the same requests (the stand-in is
    deterministic), so its log may be reused."""
    fields = rehearsal_fields(profile, test_limit=test_limit, train_limit=train_limit, data_dir=data_dir)
    text = json.dumps(fields, sort_keys=True, default=str)
    code = code_files()
    return {"profile": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "notebooks": _digest_files(sorted(Path(n) for n in notebooks)),
            "code": _digest_files(code) if code else ""}


def write_profile(profile: Profile, folder: Path, **sizes: Any) -> Profile:
    """Write the rehearsal profile as ``<folder>/<name>-rehearsal.yaml`` and load it back (validated)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{rehearsal_name(profile)}.yaml"
    text = (f"# Written by `reproduce --profile {profile.name} --rehearse` (r2mad_lab/reproduce/paper/rehearsal.py): "
            f"a rehearsal, not a run of the models.\n"
            + yaml.safe_dump(rehearsal_fields(profile, **sizes), sort_keys=False))
    atomic_write(path, text)
    return load_profile(path)


def read_log(path: Path) -> list[dict[str, Any]]:
    """The rehearsal's request log, one dict per request."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no rehearsal log at {path}: run `reproduce --profile paper --rehearse` first")
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def per_model(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Requests, prompt and completion tokens, the longest prompt and the cuts per model label."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        usage = out.setdefault(row["label"], {"model": row["model"], "context": row.get("context"), "requests": 0,
                                              "prompt_tokens": 0, "completion_tokens": 0, "longest_prompt": 0,
                                              "context_overflow": 0, "context_capped": 0, "max_tokens": 0})
        usage["requests"] += 1
        usage["prompt_tokens"] += row["prompt_tokens"]
        usage["completion_tokens"] += row["completion_tokens"]
        usage["longest_prompt"] = max(usage["longest_prompt"], row["prompt_tokens"])
        if row.get("cut") in ("context_overflow", "context_capped", "max_tokens"):
            usage[row["cut"]] += 1
    return out


def check_banks(runs_dir: Path, memory_model: str | None, expected: str) -> list[str]:
    """Problems with the banks of ``runs_dir``: none found, or one not built by ``expected`` (the memory model's id)."""
    manifests = [p for p in runs_dir.rglob("manifest.json") if "embedder" in p.read_text(encoding="utf-8")]
    if not manifests:
        return [f"no memory bank was built under {runs_dir}"]
    problems = []
    for path in manifests:
        built_by = json.loads(path.read_text(encoding="utf-8")).get("model", "")
        if memory_model and expected not in str(built_by):
            problems.append(f"bank {path.parent.name}: built by {built_by!r}, not the memory model {expected}")
    return problems


NOTE = ("REHEARSAL of profile {profile} (stand-in engines with each model's context and reply lengths; no number is a "
        "model's).")


def label_manifest(figures_dir: Path, of_profile: str, summary: Mapping[str, Any]) -> list[str]:
    """Label every artifact a rehearsal: its manifest entry gets a ``rehearsal`` record and a caption that says so
    (a table's Markdown file too); return the entries still without the label (read back from the file written)."""
    manifest = read_manifest(figures_dir)
    note = NOTE.format(profile=of_profile)
    for record in manifest["artifacts"].values():
        record["rehearsal"] = {"of_profile": of_profile, "engine": stand_in.ENGINE_NAME, "note": note}
        if "REHEARSAL" not in str(record.get("caption") or ""):
            record["caption"] = f"{note} {record.get('caption') or ''}".strip()
        for file_name in record.get("files", []):
            path = figures_dir / file_name
            if path.suffix == ".md" and path.is_file() and note not in path.read_text(encoding="utf-8"):
                atomic_write(path, path.read_text(encoding="utf-8").rstrip("\n") + f"\n\n{note}\n")
    manifest["rehearsal"] = dict(summary)
    atomic_write(figures_dir / MANIFEST_NAME, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return [name for name, record in read_manifest(figures_dir)["artifacts"].items()
            if "REHEARSAL" not in str(record.get("caption")) or not record.get("rehearsal")]


def _empty(folder: Path, keep: str) -> None:
    """Remove what ``folder`` holds except its subfolder ``keep`` (other rehearsals' folders)."""
    if not folder.is_dir():
        return
    for item in folder.iterdir():
        if item.name == keep and item.is_dir():
            continue
        shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()


def rehearse(profile: Profile, output_dir: Path, *, run: Callable[[Profile, Any], list[Any]], paths_of: Callable,
             data_dir: Path | None = None, only: Sequence[str] | None = None, echo: Callable[[str], None] = print,
             test_limit: int = TEST_LIMIT, train_limit: int = TRAIN_LIMIT, notebooks: Sequence[Path] = ()) -> int:
    """Run the rehearsal of ``profile``; ``run(profile, paths)`` runs the notebooks (the runner's
    ``run_notebooks``), ``paths_of(output_dir, folder, data_dir)`` gives its folders. Returns an exit code."""
    import os

    from r2mad_lab.reproduce.points import VARIANTS_DIR  # lazy: pandas

    started = time.perf_counter()
    name = rehearsal_folder(profile, only)
    paths = paths_of(output_dir, name, data_dir)
    for folder in (paths.figures_dir, paths.runs_dir, paths.cache_dir, paths.executed_dir):
        if folder.as_posix().endswith(name):  # only this rehearsal's own folders, never another's (variants/)
            _empty(folder, VARIANTS_DIR)
    paths.runs_dir.mkdir(parents=True, exist_ok=True)
    digests = inputs(profile, notebooks, data_dir, test_limit=test_limit, train_limit=train_limit)
    rehearsed = write_profile(profile, paths.runs_dir, test_limit=test_limit, train_limit=train_limit,
                              data_dir=data_dir)
    log = paths.runs_dir / LOG_NAME
    echo(f"rehearse: profile {profile.name} -> {name}: every model behind the rehearsal stand-in (its context and "
         f"reply lengths, no language model), {test_limit} test / {train_limit} train questions per benchmark; "
         f"requests logged to {log}")
    saved = os.environ.get(stand_in.LOG_ENVIRONMENT)
    os.environ[stand_in.LOG_ENVIRONMENT] = str(log)
    try:
        results = run(rehearsed, paths)
    finally:
        if saved is None:
            os.environ.pop(stand_in.LOG_ENVIRONMENT, None)
        else:
            os.environ[stand_in.LOG_ENVIRONMENT] = saved
    if results and results[-1].error:
        echo(f"rehearse: FAILED: notebook {results[-1].notebook}: {results[-1].error}")
        return 1
    problems = [f"artifact missing: {m}" for m in missing_artifacts(paths.figures_dir)]
    written = set(read_manifest(paths.figures_dir)["artifacts"])
    if not only and REFERENCE_MANIFEST.is_file():
        problems += [f"artifact of the manifest not written: {n}" for n in sorted(set(read_manifest(
            REFERENCE_MANIFEST.parent)["artifacts"]) - written)]
    rows = read_log(log) if log.is_file() else []
    usage = per_model(rows)
    memory = next((m for m in rehearsed.spec.memory_models if m.label == rehearsed.spec.memory_model), None)
    if memory is not None and (not only or any(t.strip().zfill(2) == "02" for t in only)):
        problems += check_banks(paths.runs_dir, memory.label, str(memory.model))
    for label, u in usage.items():
        if u["context_overflow"]:
            problems.append(f"{label}: {u['context_overflow']} of {u['requests']} prompts over its context of "
                            f"{u['context']:,} tokens (longest {u['longest_prompt']:,}): the real run would "
                            "answer them empty")
    summary = {"profile": profile.name, "overrides": {k: v for k, v in profile.overrides.items()},
               "rehearsed_notebooks": notebooks_key(only), "folder": name, "inputs": digests,
               "complete": not only and not problems and not (results and results[-1].error),
               "rehearsal_profile": str(rehearsed.source), "notebooks": [r.notebook for r in results],
               "test_limit": test_limit, "train_limit": train_limit, "embedder": "hashing", "log": LOG_NAME,
               "per_model": usage, "seconds": round(time.perf_counter() - started, 1),
               "lengths": {m: stand_in.reply_lengths(u["model"]).source for m, u in usage.items()}}
    if paths.figures_dir.is_dir() and written:
        problems += [f"not labelled a rehearsal: {n}" for n in label_manifest(paths.figures_dir, profile.name, summary)]
    paths.figures_dir.mkdir(parents=True, exist_ok=True)
    summary["complete"] = summary["complete"] and not problems
    atomic_write(paths.figures_dir / SUMMARY_NAME, json.dumps(summary, indent=2, default=str) + "\n")
    for label, u in usage.items():
        echo(f"  {label} ({u['model']}): {u['requests']:,} requests, {u['prompt_tokens']:,} prompt + "
             f"{u['completion_tokens']:,} completion tokens; longest prompt {u['longest_prompt']:,}"
             + (f" of {u['context']:,}" if u["context"] else ""))
    if problems:
        for line in problems:
            echo(f"rehearse: FAILED: {line}")
        return 1
    use = ("estimate from it: --estimate-only" + (f" {' '.join(f'--set {k}={v}' for k, v in profile.overrides.items())}"
                                                  if profile.overrides else "")
           if summary["complete"] else f"a part (notebooks {'+'.join(summary['rehearsed_notebooks'])}): "
           "--estimate-only uses only a rehearsal of every notebook")
    echo(f"rehearse: done in {summary['seconds']:.0f} s; {len(written)} artifacts in {paths.figures_dir}, each "
         f"labelled a rehearsal; {use}")
    return 0
