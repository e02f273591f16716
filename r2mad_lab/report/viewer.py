"""The debate viewer: a run directory's debates as one self-contained HTML page (Eqs. 1-7 as they ran).

Per question, one grid per run: the rounds t as columns and the agents i as rows. Each cell is the agent's
response z_i^(t) (Eq. 1) with its parsed answer marked right or wrong, the stance change from t-1 highlighted
(wrong -> right green, right -> wrong red, another wrong answer amber), and, for R2-MAD, what the round hook
recorded (``retrieved`` of :class:`r2mad_core.records.TurnRecord`): the experiences E_i^(t) it retrieved (Eq. 5-6:
the case's question, the agent's answer then, the reference y, the reward r_i, the MMR score, the similarity,
lambda_t) and the confidence c_{j,i} with the annotation shown for each peer (Eq. 7). Under the grid: the consensus
ratio Cons(Z^(t)) (Eq. 3) and the summary h^(t) of every round; for MAD-M2, which peer responses were masked.

The case texts come from the run's memory bank (``config.json`` names it; a bank that moved is looked for beside
the run directory, or given with ``memory=``); the rewards shown are the transcript's, i.e. what the run used
(a poisoned bank's flipped labels, notebook 09). The question text comes from the benchmark files.

Filters: questions of the shared-misconception subset (a strict majority of the MAD agents wrong at round 0,
:func:`r2mad_lab.report.stances.shared_misconception_subset`: from a MAD run among those shown, else from the
first run's own round 0, which is MAD's under ``round0: shared``), and, with two runs, questions whose final
correctness differs. :func:`write_page` is ``r2mad view``; :func:`show` is the same view inline in a notebook.
The page is one file: inline CSS and a few lines of inline JavaScript for the filters; no server, no network.
"""

from __future__ import annotations

import html
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from r2mad_core.data import benchmarks
from r2mad_core.memory.cases import MemoryCase
from r2mad_core.memory.retrieval import POLICIES, policy_label
from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS
from r2mad_core.memory.settings import SPECS as MEMORY_SPECS
from r2mad_core.records import RoundRecord, RunConfig, TranscriptRecord, TurnRecord
from r2mad_lab.experiments.cell import load_run
from r2mad_lab.experiments.run_settings import RecordedSettings, read_settings
from r2mad_lab.report.stances import shared_misconception_subset

logger = logging.getLogger(__name__)

MAX_RUNS = 2
METHOD_NAMES = {"cot": "CoT", "self_consistency": "Self-Consistency", "mad": "MAD", "mad_m2": "MAD-M2",
                "r2mad": "R2-MAD", "icl_cot": "ICL-CoT"}


class ViewerError(ValueError):
    """A run directory, question or bank the viewer cannot show (one line naming it)."""


@dataclass
class RunView:
    """One run directory as the viewer reads it."""

    run_dir: Path
    config: RunConfig
    records: dict[str, TranscriptRecord]  # sample id -> transcript record (typed: r2mad_core.records), file order
    cases: dict[str, MemoryCase] = field(default_factory=dict)  # case id -> case of the run's memory bank
    bank_note: str = ""  # where the cases came from, or why there are none

    @property
    def method(self) -> str:
        return str(self.config.method["name"])

    @property
    def label(self) -> str:
        settings = read_settings(self.config.method)  # the run's settings, read back whole (one reader)
        options = settings.options  # the method's own row options (masking, use_memory, ...): as recorded
        name = METHOD_NAMES.get(self.method, self.method)
        extras = []
        if self.method == "mad_m2":
            extras.append(str(options.get("masking", "")))
        if self.method == "r2mad":
            if options.get("use_memory") is False:
                extras.append("w/o Memory")
            if options.get("use_confidence") is False:
                extras.append("w/o Confidence")
            if settings.memory.retrieval_policy != MEMORY_DEFAULTS["retrieval_policy"]:
                extras.append(f"retrieval={retrieval_label(settings)}")
            if options.get("poison_fraction"):
                extras.append(f"poisoned {options['poison_fraction']:g}")
        if settings.recorded("round0") and settings.debate.round0 == "independent":
            extras.append("independent round 0")
        return name + (f" ({', '.join(e for e in extras if e)})" if any(extras) else "")

    def describe(self) -> str:
        c = self.config
        n = len(self.records)
        correct = sum(bool(r.correct) for r in self.records.values())
        accuracy = f"accuracy {correct}/{n} = {correct / n:.3f}" if n else "no finished questions"
        return (f"{self.label} on {c.benchmark} {c.split} ({n} questions, {accuracy}); model "
                f"{c.engine.get('model')} (engine {str(c.engine.get('identity', '')).split(':', 1)[0]}), "
                f"seed {c.seed}, r2mad {c.r2mad_version}; run directory {self.run_dir.name}")


def retrieval_label(settings: RecordedSettings | Mapping[str, Any]) -> str:
    """The executed retrieval policy with its parameter as the run recorded it: ``Fixed-lambda (0.25)`` (the policy's
    label, :func:`r2mad_core.memory.retrieval.policy_label`), else the policy's name as written. ``settings``: the
    run's (:func:`~r2mad_lab.experiments.run_settings.read_settings`), or its recorded options."""
    if not isinstance(settings, RecordedSettings):
        settings = read_settings({"options": dict(settings)})
    name = str(settings.memory.retrieval_policy)
    spec = POLICIES.get(name)
    if spec is None:
        return name
    value = None
    if spec.parameter:
        value = getattr(settings.memory, spec.parameter) if spec.parameter in MEMORY_SPECS and \
            settings.recorded(spec.parameter) else settings.options.get(spec.parameter)
    return policy_label(f"{name}:{value}" if value is not None else name)


def _find_bank(run_dir: Path, memory: str | Path | None) -> Path | None:
    """The run's memory bank directory: ``memory`` if given, else the config's path as written (relative to the
    working directory), else a directory of that name beside the run directory or one of its parents."""
    if memory is None:
        return None
    memory = Path(memory)
    candidates = [memory] + [parent / memory.name for parent in [run_dir.parent, *run_dir.parent.parents][:4]]
    return next((c for c in candidates if (c / "manifest.json").is_file()), None)


def _read_cases(bank: Path) -> dict[str, MemoryCase]:
    manifest = json.loads((bank / "manifest.json").read_text(encoding="utf-8"))
    cases: dict[str, MemoryCase] = {}
    for entry in manifest.get("agents", []):
        path = bank / entry["directory"] / "cases.jsonl"
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    case = MemoryCase.from_json(json.loads(line), f"{path}:{number}")
                    cases[case.case_id] = case
    return cases


def load_view(run_dir: str | Path, memory: str | Path | None = None) -> RunView:
    """Read a run directory (and the memory bank its config names, or ``memory``) for the viewer."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ViewerError(f"{run_dir}: not a directory (expected a run directory written by r2mad run)")
    try:
        config, records = load_run(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise ViewerError(str(exc)) from None
    view = RunView(run_dir, RunConfig.model_validate(config), {r.sample_id: r for r in records})
    named = memory if memory is not None else view.config.method.get("options", {}).get("memory")
    if named is not None:
        bank = _find_bank(run_dir, named)
        if bank is None:
            if memory is not None:
                raise ViewerError(f"{memory}: not a memory bank directory (no manifest.json)")
            view.bank_note = (f"memory bank {Path(str(named)).name} not found (give it with --memory): "
                              "retrieved experiences are shown by case id only")
        else:
            view.cases = _read_cases(bank)
            view.bank_note = f"experiences from memory bank {bank.name} ({len(view.cases)} cases)"
    return view


def _question_texts(benchmark: str, ids: Iterable[str]) -> dict[str, str]:
    """The question text of each id from the benchmark files ({} when they cannot be read)."""
    wanted = set(ids)
    try:
        return {s.id: s.question for s in benchmarks.load(benchmark, "all") if s.id in wanted}
    except Exception as exc:  # noqa: BLE001 -- the view still shows the debate without the question text
        logger.warning("question texts of %s not shown: %s", benchmark, exc)
        return {}


# --------------------------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------------------------
def shared_misconception_ids(runs: Sequence[RunView]) -> tuple[set[str], str]:
    """The shared-misconception subset and where it was taken from (a MAD run shown, else the first run's round 0)."""
    reference = next((r for r in runs if r.method == "mad"), runs[0])
    source = ("the MAD run's round 0" if reference.method == "mad"
              else f"the {reference.label} run's own round 0 (MAD's under round0: shared)")
    return shared_misconception_subset(reference.records.values()), source


def differing_ids(runs: Sequence[RunView]) -> set[str]:
    """Questions both runs finished whose final correctness differs (empty with one run)."""
    if len(runs) < 2:
        return set()
    first, second = runs[0].records, runs[1].records
    return {q for q in first if q in second and bool(first[q].correct) != bool(second[q].correct)}


def select_questions(runs: Sequence[RunView], *, question: str | None = None, shared_only: bool = False,
                     differs_only: bool = False, limit: int | None = None) -> list[str]:
    """The question ids to show, in the first run's order (ViewerError for an unknown id or an empty selection)."""
    ids = list(runs[0].records)
    for run in runs[1:]:
        ids += [q for q in run.records if q not in runs[0].records]
    if question is not None:
        if not any(question in r.records for r in runs):
            examples = ", ".join(ids[:3])
            raise ViewerError(f"question {question!r} is not in {runs[0].run_dir}"
                              + (f" (its questions: {examples}, ...)" if ids else " (no finished questions)"))
        return [question]
    if shared_only:
        shared, _ = shared_misconception_ids(runs)
        ids = [q for q in ids if q in shared]
    if differs_only:
        if len(runs) < 2:
            raise ViewerError("--differs-only needs two run directories (e.g. an R2-MAD run and a MAD run)")
        differ = differing_ids(runs)
        ids = [q for q in ids if q in differ]
    if limit is not None:
        ids = ids[:limit]
    return ids


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------
#: The viewer's style, shared with the index's pages (r2mad_lab/report/run_pages.py): viewer_assets/viewer.css.
STYLE = (Path(__file__).with_name("viewer_assets") / "viewer.css").read_text(encoding="utf-8")

SCRIPT = """
(function(){
  function apply(){
    var shared=document.getElementById('f-shared'), differ=document.getElementById('f-differ');
    var onlyShared=shared&&shared.checked, onlyDiffer=differ&&differ.checked, shown=0;
    document.querySelectorAll('[data-q]').forEach(function(el){
      var hide=(onlyShared&&el.getAttribute('data-shared')!=='1')||(onlyDiffer&&el.getAttribute('data-differs')!=='1');
      el.classList.toggle('hidden',hide);
      if(!hide&&el.tagName==='SECTION'){shown+=1;}
    });
    var count=document.getElementById('f-count'); if(count){count.textContent=String(shown);}
  }
  document.querySelectorAll('.filters input').forEach(function(box){box.addEventListener('change',apply);});
  apply();
})();
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _answer_badge(answer: Any, correct: Any) -> str:
    if answer is None:
        return '<span class="ans none" title="no parsable answer">no answer</span>'
    mark, cls = ("✓", "ok") if correct else ("✗", "bad")
    return f'<span class="ans {cls}" title="{"right" if correct else "wrong"}">{_e(answer)} {mark}</span>'


def _stance(previous: TurnRecord | None, turn: TurnRecord) -> tuple[str, str]:
    """(cell class, label) of agent i's change from round t-1 to t."""
    if previous is None or previous.answer == turn.answer:
        return "", ""
    was, now = bool(previous.correct), bool(turn.correct)
    before = "no answer" if previous.answer is None else previous.answer
    to = " → no answer" if turn.answer is None else ""
    if not was and now:
        return "w2c", f"wrong → right (was {before})"
    if was and not now:
        return "c2w", f"right{to or ' → wrong'} (was {before})"
    return "changed", f"changed from {before}{to}"


def _number(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{float(value):.{digits}f}"


def _experiences(turn: TurnRecord, run: RunView, expand: bool = False) -> str:
    """E_i^(t): one block per retrieved case (narrow enough for a grid cell); ``retrieved`` is the round hook's record
    (policy, case ids, scores, lambda_t, confidence), a JSON object in the typed turn."""
    info = turn.retrieved or {}
    ids = info.get("case_ids") or []
    if not info:
        return ""
    shown = "shown in the prompt" if info.get("memory_shown", True) else "not shown (w/o Memory: confidence only)"

    def at(key: str, k: int) -> Any:
        values = info.get(key) or []
        return values[k] if k < len(values) else None

    blocks = []
    for k, case_id in enumerate(ids):
        case = run.cases.get(case_id)
        numbers = (f'<span class="tag">reward <b data-reward>{_e(at("rewards", k))}</b> · MMR score '
                   f'<b data-score>{_number(at("scores", k))}</b> · similarity {_number(at("similarities", k))}</span>')
        if case is None:
            detail = '<div class="tag">case text not available (memory bank not found)</div>'
        else:
            stem = case.state.question.strip().split("\n", 1)[0]
            detail = (f'<div>its answer then {_answer_badge(case.answer, case.is_correct)} '
                      f'<span class="tag">(round {case.round_index})</span> · reference <b data-reference>'
                      f'{_e(case.gold)}</b></div><details><summary>{_e(stem[:90] + ("…" if len(stem) > 90 else ""))}'
                      f'</summary><pre data-question>{_e(case.state.question)}</pre></details>')
        blocks.append(f'<div class="case" data-case="{_e(case_id)}"><div class="cid">{_e(case_id)}</div>{numbers}'
                      f"{detail}</div>")
    return (f'<details class="experiences"{" open" if expand else ""}><summary>{len(ids)} experiences, λ_t = '
            f'{_number(info.get("lambda"), 2)} ({_e(info.get("policy"))}; {shown})</summary>' + "".join(blocks)
            + "</details>")


def _peers(turn: TurnRecord) -> str:
    info = turn.retrieved or {}
    # peer j -> c_ji and its annotation; the hook's JSON has string keys, the typed turn's peer_confidence int keys
    confidence = {int(k): v for k, v in (info.get("confidence") or {}).items()}
    annotations = {int(k): v for k, v in (turn.peer_confidence or info.get("annotation") or {}).items()}
    parts = []
    for peer in sorted(set(confidence) | set(annotations)):
        label = annotations.get(peer)
        text = f"agent {peer}: {label or 'no annotation'} (c = {_number(confidence.get(peer), 2)})"
        parts.append(f'<span class="{_e(label or "")}">{_e(text)}</span>')
    if not parts:
        return ""
    shown = "" if info.get("confidence_shown", True) else " (not shown: w/o Confidence)"
    return f'<div class="peers">confidence in peers{shown}: ' + "; ".join(parts) + "</div>"


def _turn_cell(turn: TurnRecord, previous: TurnRecord | None, rnd: RoundRecord, run: RunView,
               expand: bool = False) -> str:
    cls, flip = _stance(previous, turn)
    tags = []
    if turn.truncated:
        tags.append("cut at max_tokens")
    visible = turn.visible_peers
    if visible is not None and rnd.masking:
        tags.append("saw agents " + (", ".join(str(v) for v in visible) or "none"))
    body = [_answer_badge(turn.answer, turn.correct)]
    if flip:
        body.append(f'<span class="flip">{_e(flip)}</span>')
    body += [f'<span class="tag">{_e(t)}</span>' for t in tags]
    body.append(f'<details><summary>response</summary><pre>{_e(turn.response)}</pre></details>')
    body.append(_peers(turn))
    body.append(_experiences(turn, run, expand))
    return (f'<td class="turn {cls}" data-round="{rnd.round}" data-agent="{turn.agent}" '
            f'data-answer="{_e(turn.answer)}" data-correct="{int(bool(turn.correct))}">'
            + "".join(body) + "</td>")


def _masking(rnd: RoundRecord, n_agents: int) -> str:
    info = rnd.masking or {}  # MAD-M2's record: strategy, kept, verdicts, mean_logprob (a JSON object)
    if not info:
        return ""
    kept = [int(k) for k in info.get("kept") or []]
    masked = [j for j in range(n_agents) if j not in kept]
    text = f"{info.get('strategy', '')} masking: masked {', '.join(map(str, masked)) or 'none'}"
    if info.get("verdicts"):
        text += "; judge: " + ", ".join(f"{j}: {v}" for j, v in enumerate(info["verdicts"]))
    if info.get("mean_logprob"):
        text += "; mean logprob: " + ", ".join(_number(v, 2) for v in info["mean_logprob"])
    return f'<div class="mask">{_e(text)}</div>'


def debate_grid(record: TranscriptRecord, run: RunView, expand: bool = False) -> str:
    """One debate: rounds as columns, agents as rows, then the consensus ratio and summary of each round."""
    rounds = record.rounds
    n_agents = max((len(r.agents) for r in rounds), default=0)
    head = "".join(f'<th data-round="{r.round}">round {r.round}{_masking(r, n_agents)}</th>' for r in rounds)
    rows = []
    for i in range(n_agents):
        cells = []
        for t, rnd in enumerate(rounds):
            turn = next((a for a in rnd.agents if a.agent == i), None)
            previous = None if t == 0 else next((a for a in rounds[t - 1].agents if a.agent == i), None)
            cells.append(_turn_cell(turn, previous, rnd, run, expand) if turn else "<td>–</td>")
        rows.append(f'<tr><td class="agent">agent {i}</td>{"".join(cells)}</tr>')
    consensus = "".join(f"<td>{_number(r.consensus_ratio, 2)}{' (unanimous)' if r.unanimous else ''}</td>"
                        for r in rounds)
    summaries = "".join(f"<td><pre>{_e(r.summary)}</pre></td>" if r.summary else "<td>–</td>" for r in rounds)
    rows.append(f'<tr><td class="agent">consensus</td>{consensus}</tr>')
    if any(r.summary for r in rounds):
        rows.append(f'<tr><td class="agent">summary</td>{summaries}</tr>')
    vote = record.vote
    groups = list(vote.group_sizes)
    stopped = (f"; stopped after round {rounds[-1].round} (unanimous)" if record.stopped_early else "")
    final = (f'<div class="final">final answer {_answer_badge(record.final_answer, record.correct)} '
             f'by {_e(vote.rule)} vote (groups {_e(groups)}{", tie broken" if vote.tied else ""})'
             f"{_e(stopped)}</div>")
    return (f'<div class="gridwrap"><table class="grid"><tr><th class="agent">agent</th>{head}</tr>{"".join(rows)}'
            f'</table></div>{final}')


def question_section(qid: str, runs: Sequence[RunView], question_text: str | None, shared: set[str],
                     differ: set[str], expand: bool = False) -> str:
    first = next(r.records[qid] for r in runs if qid in r.records)
    flags = []
    if qid in shared:
        flags.append("shared misconception")
    if qid in differ:
        flags.append("the runs end differently")
    parts = [f'<section class="q" id="{_e(_anchor(qid))}" data-q="{_e(qid)}" data-shared="{int(qid in shared)}" '
             f'data-differs="{int(qid in differ)}"><h2>{_e(qid)} · reference {_e(first.gold)}'
             + (f' <span class="tag">{_e("; ".join(flags))}</span>' if flags else "") + "</h2>"]
    if question_text:
        parts.append(f"<details{' open' if expand else ''}><summary>question</summary>"
                     f"<pre>{_e(question_text)}</pre></details>")
    parts.append('<div class="runs">')
    for run in runs:
        record = run.records.get(qid)
        body = debate_grid(record, run, expand) if record else "<p>not in this run</p>"
        parts.append(f'<div class="run" data-method="{_e(run.method)}"><h3>{_e(run.label)}</h3>{body}</div>')
    parts.append("</div></section>")
    return "".join(parts)


def _anchor(qid: str) -> str:
    return "q-" + "".join(c if c.isalnum() else "-" for c in qid)


def render(runs: Sequence[RunView], ids: Sequence[str], *, page: bool = True, expand: bool = False) -> str:
    """The view of ``ids``: a whole HTML document (``page``) or a fragment for a notebook cell; ``expand`` opens the
    question and the retrieved experiences (the responses stay folded)."""
    shared, shared_source = shared_misconception_ids(runs)
    differ = differing_ids(runs)
    texts = _question_texts(runs[0].config.benchmark, ids)
    body = ['<div class="r2v">']
    if page:
        body.append("<h1>Debates: " + _e(" vs ".join(r.label for r in runs)) + "</h1>")
    body += [f'<p class="what">{_e(run.describe())}' + (f"; {_e(run.bank_note)}" if run.bank_note else "") + "</p>"
             for run in runs]
    body.append(f'<p class="what">Cell borders: green wrong → right, red right → wrong, amber another answer. '
                f"Shared misconception from {_e(shared_source)}: {len(shared & set(ids))} of {len(ids)} "
                "questions shown.</p>")
    if page and len(ids) > 1:
        body.append('<div class="filters"><label><input type="checkbox" id="f-shared"> shared-misconception questions '
                    "only</label>" + ('&nbsp; <label><input type="checkbox" id="f-differ"> questions where the runs '
                                      "end differently</label>" if len(runs) > 1 else "")
                    + f' &nbsp; showing <span id="f-count">{len(ids)}</span> of {len(ids)}</div>')
        header = "".join(f"<th>{_e(r.label)}</th>" for r in runs)
        rows = []
        for qid in ids:
            finals = "".join(
                f"<td>{_answer_badge(r.records[qid].final_answer, r.records[qid].correct)}</td>"
                if qid in r.records else "<td>–</td>" for r in runs)
            rows.append(f'<tr data-q="{_e(qid)}" data-shared="{int(qid in shared)}" '
                        f'data-differs="{int(qid in differ)}"><td><a '
                        f'href="#{_e(_anchor(qid))}">{_e(qid)}</a></td>{finals}'
                        f'<td>{"yes" if qid in shared else ""}</td></tr>')
        body.append(f'<table class="index"><tr><th>question</th>{header}<th>shared misconception</th></tr>'
                    + "".join(rows) + "</table>")
    body += [question_section(qid, runs, texts.get(qid), shared, differ, expand) for qid in ids]
    body.append("</div>")
    fragment = f"<style>{STYLE}</style>" + "".join(body)
    if not page:
        return fragment
    title = "r2mad debates: " + " vs ".join(r.label for r in runs)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>body{{margin:16px;background:#fff}}</style></head><body>{fragment}"
            f"<script>{SCRIPT}</script></body></html>\n")


def _load_runs(run_dirs: Sequence[str | Path], memory: str | Path | None) -> list[RunView]:
    if not 1 <= len(run_dirs) <= MAX_RUNS:
        raise ViewerError(f"give one or two run directories, found {len(run_dirs)}")
    runs = [load_view(d, memory if i == 0 else None) for i, d in enumerate(run_dirs)]
    benchmarks = {r.config.benchmark for r in runs}
    if len(benchmarks) > 1:
        raise ViewerError(
            f"the runs are on different benchmarks ({', '.join(sorted(benchmarks))}): compare runs of one")
    return runs


#: ``r2mad view``'s page in the run directory: its own name, beside ``r2mad runs``' ``view.html`` (sharing
#: the name, it replaced that page, silently).
PAGE_FILE = "debates.html"


def write_page(run_dirs: Sequence[str | Path], out: str | Path | None = None, *, question: str | None = None,
               memory: str | Path | None = None, shared_only: bool = False, differs_only: bool = False,
               limit: int | None = None) -> Path:
    """Write the page of one run directory (or two, compared) to ``out`` (default: :data:`PAGE_FILE` in the first,
    beside the run page ``view.html`` that ``r2mad runs`` writes there, never over it)."""
    runs = _load_runs(run_dirs, memory)
    ids = select_questions(runs, question=question, shared_only=shared_only, differs_only=differs_only, limit=limit)
    if not ids:
        raise ViewerError(f"{runs[0].run_dir}: no question to show (no finished questions, or none passes the filters)")
    path = Path(out) if out is not None else runs[0].run_dir / PAGE_FILE
    path.write_text(render(runs, ids, page=True), encoding="utf-8")
    return path


def show(*run_dirs: str | Path, question: str | None = None, memory: str | Path | None = None,
         shared_only: bool = False, differs_only: bool = False, limit: int | None = 1, expand: bool = True) -> Any:
    """The same view inline in a notebook (``IPython.display.HTML``): by default the first selected question, its
    text and retrieved experiences unfolded."""
    from IPython.display import HTML  # lazy: IPython only inside a notebook kernel

    runs = _load_runs(run_dirs, memory)
    ids = select_questions(runs, question=question, shared_only=shared_only, differs_only=differs_only, limit=limit)
    if not ids:
        return HTML("<p>no question to show (none passes the filters)</p>")
    return HTML(render(runs, ids, page=False, expand=expand))
