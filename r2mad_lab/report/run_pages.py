"""Light run pages: a run's questions and debates as a data file beside one shared viewer script (``r2mad runs``).

A run directory gets ``view.html`` (a few hundred bytes: a title and two script tags), ``view.data.js`` (one line per
question: its text, the reference, the final answer and correctness, the stance changes and flips of its agents,
turns without an answer, overflow, the shared-misconception flag, what was retrieved and the confidence in peers;
and the memory cases the run retrieved) and ``view.grids-<k>.js`` (the transcript records, 100 a file, loaded when
a question is opened: the debate grid is drawn from them). The data files are JSON wrapped in one function call
(``R2V.run({...})``): a page opened from the disk (``file://``) may load a script but not fetch a JSON file.

The viewer script and its style (``viewer_assets/``) are copied once into ``<runs folder>/_viewer/``; the index
(``index.html``) and the two-run comparison (``compare.html``) are beside it, their data in ``_viewer/index.data.js``.
Everything is offline: no server, no network. The debate grid is :func:`r2mad_lab.report.viewer.debate_grid`'s,
drawn in the browser (``viewer.js``: ``grid``) so that a run page costs nothing until a question is opened.

Per question, from the transcript record (:class:`r2mad_core.records.TranscriptRecord`, read as JSON for speed):
stance changes are turns t >= 1 whose answer differs from the agent's at t-1; a flip wrong -> right (right -> wrong)
is such a change whose correctness went from wrong to right (right to wrong); "no answer" is a turn with no parsable
answer (an empty response among them); overflow is a turn cut at max_tokens or by the context; the shared
misconception is :func:`r2mad_lab.report.stances.shared_misconception_subset`'s rule on the run's own round 0 (a
strict majority of the agents wrong); the retrieval figures are the experiences retrieved and the mean lambda_t
(Eq. 6), the confidence figure the mean c_{j,i} over the peers (Eq. 7).
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Mapping

from r2mad_core.data import benchmarks
from r2mad_core.memory.cases import MemoryCase
from r2mad_lab.report.viewer import _find_bank, _read_cases

ASSETS = Path(__file__).with_name("viewer_assets")
ASSET_DIR = "_viewer"  # in the runs folder: viewer.js, viewer.css, index.data.js
DATA_FILE = "view.data.js"
PAGE_FILE = "view.html"
CHUNK = 100  # transcript records per grids file
INDEX_DATA = "index.data.js"
COMPARE_PAGE = "compare.html"


class PageError(ValueError):
    """A run whose transcripts cannot be shown (one line naming the file and line)."""


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def question_row(record: Mapping[str, Any], text: str, chunk: int) -> dict[str, Any]:
    """The figures of one question (the module's docstring says what each counts)."""
    rounds = record.get("rounds") or []
    changes = w2c = c2w = no_answer = experiences = 0
    overflow = bool(record.get("truncated_completions"))
    lambdas: list[float] = []
    confidence: list[float] = []
    previous: dict[int, Mapping[str, Any]] = {}
    for rnd in rounds:
        for turn in rnd.get("agents", []):
            answer = turn.get("answer")
            no_answer += answer is None
            overflow = overflow or bool(turn.get("truncated")) or turn.get("cut") is not None
            info = turn.get("retrieved") or {}
            experiences += len(info.get("case_ids") or [])
            if info.get("lambda") is not None:
                lambdas.append(float(info["lambda"]))
            confidence += [float(c) for c in (info.get("confidence") or {}).values() if c is not None]
            before = previous.get(turn.get("agent"))
            if before is not None and before.get("answer") != answer:
                changes += 1
                was, now = bool(before.get("correct")), bool(turn.get("correct"))
                w2c += (not was) and now
                c2w += was and not now
            previous[turn.get("agent")] = turn
    first = rounds[0].get("agents", []) if rounds else []
    wrong = sum(1 for a in first if not a.get("correct"))
    return {"id": record["sample_id"], "text": text, "gold": record.get("gold"), "final": record.get("final_answer"),
            "correct": bool(record.get("correct")), "changes": changes, "w2c": w2c, "c2w": c2w, "no_answer": no_answer,
            "overflow": overflow, "shared": bool(first) and wrong * 2 > len(first), "experiences": experiences,
            "lambda": _mean(lambdas), "confidence": _mean(confidence), "chunk": chunk}


class Sources:
    """The benchmarks' question texts and the memory banks' cases, each read once for every run of a build."""

    def __init__(self) -> None:
        self._texts: dict[str, dict[str, str]] = {}
        self._banks: dict[Path, dict[str, MemoryCase]] = {}

    def texts(self, benchmark: str) -> dict[str, str]:
        if benchmark not in self._texts:
            try:
                self._texts[benchmark] = {s.id: s.question for s in benchmarks.load(benchmark, "all")}
            except Exception:  # noqa: BLE001 -- a benchmark that cannot be read: the page shows ids without text
                self._texts[benchmark] = {}
        return self._texts[benchmark]

    def cases(self, run_dir: Path, named: Any) -> tuple[dict[str, MemoryCase], str]:
        if named is None:
            return {}, ""
        bank = _find_bank(run_dir, named)
        if bank is None:
            return {}, f"memory bank {Path(str(named)).name} not found: retrieved experiences are shown by case id only"
        if bank not in self._banks:
            self._banks[bank] = _read_cases(bank)
        return self._banks[bank], f"experiences from memory bank {bank.name} ({len(self._banks[bank])} cases)"


def _script(call: str, *args: Any) -> str:
    """``R2V.<call>(<JSON>, ...);``: a data file a ``file://`` page can load (``</`` escaped for the script tag)."""
    body = ", ".join(json.dumps(a, ensure_ascii=False, separators=(",", ":")) for a in args).replace("</", "<\\/")
    return f"R2V.{call}({body});\n"


def read_script(path: str | Path) -> list[Any]:
    """The JSON arguments of a data file written by :func:`_script` (``R2V.run({...});`` -> ``[{...}]``)."""
    text = Path(path).read_text(encoding="utf-8").strip()
    start, end = text.index("("), text.rindex(")")
    return json.loads(f"[{text[start + 1:end]}]")


def _page(title: str, assets: str, attributes: Mapping[str, str]) -> str:
    attrs = "".join(f' {k}="{html.escape(v, quote=True)}"' for k, v in attributes.items())
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><link rel=\"stylesheet\" href=\"{assets}/viewer.css\">"
            "<style>body{margin:16px;background:#fff}</style></head>"
            f"<body><div id=\"r2v-app\" class=\"r2v\"{attrs}><p>loading ... (this page needs JavaScript)</p></div>"
            f"<script src=\"{assets}/viewer.js\"></script></body></html>\n")


def write_run(run_dir: Path, key: str, name: str, describe: str, options: Mapping[str, Any], benchmark: str,
              assets_folder: Path, sources: Sources) -> tuple[Path, list[dict[str, Any]]]:
    """Write a run's page and data files (``key``: its path as the index names it); returns the page and the
    questions' rows (:func:`question_row`)."""
    transcripts = run_dir / "transcripts.jsonl"
    texts = sources.texts(benchmark)
    cases, bank_note = sources.cases(run_dir, options.get("memory"))
    rows: list[dict[str, Any]] = []
    chunks: list[list[str]] = []
    wanted: set[str] = set()
    with transcripts.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                chunk = len(rows) // CHUNK
                rows.append(question_row(record, texts.get(record["sample_id"], ""), chunk))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise PageError(
                    f"{transcripts}:{number}: not a transcript record ({type(exc).__name__}: {exc})") from None
            if chunk == len(chunks):
                chunks.append([])
            chunks[chunk].append(line.strip())
            for rnd in record.get("rounds") or []:
                for turn in rnd.get("agents", []):
                    wanted.update((turn.get("retrieved") or {}).get("case_ids") or [])
    used = {cid: {"question": c.state.question, "answer": c.answer, "correct": c.is_correct, "gold": c.gold,
                  "round": c.round_index} for cid, c in cases.items() if cid in wanted}
    notes = "; ".join(n for n in (bank_note, "question texts from the benchmark files" if texts else
                                  "question texts not available (the benchmark files could not be read)") if n)
    data = {"key": key, "name": name, "describe": describe, "notes": notes, "questions": rows, "cases": used,
            "chunks": len(chunks)}
    for old in run_dir.glob("view.grids-*.js"):
        old.unlink()
    for k, lines in enumerate(chunks):
        body = ",\n".join(lines).replace("</", "<\\/")
        (run_dir / f"view.grids-{k}.js").write_text(f"R2V.chunk({json.dumps(key)}, {k}, [\n{body}\n]);\n",
                                                    encoding="utf-8")
    (run_dir / DATA_FILE).write_text(_script("run", data), encoding="utf-8")
    page = run_dir / PAGE_FILE
    assets = Path(os.path.relpath(assets_folder, run_dir)).as_posix()
    page.write_text(_page(f"r2mad run: {name}", assets, {"data-page": "run", "data-data": DATA_FILE}), encoding="utf-8")
    return page, rows


def write_site(folder: Path, index_name: str, title: str, index_data: Mapping[str, Any]) -> Path:
    """The viewer's assets, the index's data, the index page (``folder/index_name``) and the comparison page."""
    assets = folder / ASSET_DIR
    assets.mkdir(exist_ok=True)
    for name in ("viewer.js", "viewer.css"):
        target = assets / name
        source = (ASSETS / name).read_bytes()
        if not target.is_file() or target.read_bytes() != source:
            target.write_bytes(source)
    (assets / INDEX_DATA).write_text(_script("indexData", dict(index_data)), encoding="utf-8")
    attributes = {"data-index": f"{ASSET_DIR}/{INDEX_DATA}"}
    (folder / COMPARE_PAGE).write_text(_page(f"{title}: two runs compared", ASSET_DIR,
                                             {"data-page": "compare", **attributes}), encoding="utf-8")
    index = folder / index_name
    index.write_text(_page(title, ASSET_DIR, {"data-page": "index", **attributes}), encoding="utf-8")
    return index
