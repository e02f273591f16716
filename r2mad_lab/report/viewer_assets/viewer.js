/* r2mad run viewer (r2mad_lab/report/run_pages.py writes its data): the index of a profile's runs, a run's
   questions and debates, two runs compared. Offline: data files are scripts loaded on demand (file:// pages cannot
   fetch JSON), no network. The debate grid is r2mad_lab/report/viewer.py's debate_grid, drawn from the record. */
(function () {
  "use strict";
  var R2V = window.R2V = {runs: {}, grids: {}, index: null, waiting: {}};

  function esc(v) {
    return String(v === null || v === undefined ? "" : v).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function num(v, d) { return (v === null || v === undefined || isNaN(v)) ? "–" : Number(v).toFixed(d === undefined ? 3 : d); }
  function el(id) { return document.getElementById(id); }
  function fail(message) { console.error("r2mad viewer: " + message); var box = el("r2v-error");
    if (box) { box.textContent = message; box.classList.remove("hidden"); } }

  /* ---------- loading data scripts on demand ---------- */
  function load(src, done) {
    if (R2V.waiting[src] === true) { done(); return; }
    if (R2V.waiting[src]) { R2V.waiting[src].push(done); return; }
    R2V.waiting[src] = [done];
    var s = document.createElement("script");
    s.src = src;
    s.onload = function () { var calls = R2V.waiting[src]; R2V.waiting[src] = true; calls.forEach(function (f) { f(); }); };
    s.onerror = function () { fail("could not load " + src + " (run `r2mad runs` again to write it)"); };
    document.head.appendChild(s);
  }
  R2V.indexData = function (data) { R2V.index = data; };
  R2V.run = function (data) { R2V.lastLoaded = data; };
  R2V.chunk = function (key, k, records) { R2V.grids[key + "#" + k] = records; };
  /* a run's data by the path of its file; its grids are loaded from the same folder */
  function withRun(src, done) {
    if (R2V.runs[src]) { done(R2V.runs[src]); return; }
    load(src, function () {
      if (!R2V.runs[src] && R2V.lastLoaded) { R2V.lastLoaded.base = src.replace(/[^/]*$/, ""); R2V.runs[src] = R2V.lastLoaded; R2V.lastLoaded = null; }
      done(R2V.runs[src]);
    });
  }

  /* ---------- sortable, filterable tables ---------- */
  function sortable(table, rows, columns, render) {
    var state = {key: null, dir: 1};
    table.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.addEventListener("click", function () {
        var key = th.getAttribute("data-sort");
        state.dir = state.key === key ? -state.dir : 1; state.key = key;
        table.querySelectorAll("th[data-sort]").forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
        rows.sort(function (a, b) {
          var x = columns[key](a), y = columns[key](b);
          if (x === y) return 0; if (x === null || x === undefined) return 1; if (y === null || y === undefined) return -1;
          return (x < y ? -1 : 1) * state.dir;
        });
        render();
      });
    });
  }
  function matches(text, query) { return !query || text.toLowerCase().indexOf(query.toLowerCase()) >= 0; }

  /* ---------- the debate grid (viewer.py: _answer_badge, _stance, _peers, _experiences, debate_grid) ---------- */
  function badge(answer, correct) {
    if (answer === null || answer === undefined) return '<span class="ans none" title="no parsable answer">no answer</span>';
    return '<span class="ans ' + (correct ? "ok" : "bad") + '" title="' + (correct ? "right" : "wrong") + '">' + esc(answer)
      + " " + (correct ? "✓" : "✗") + "</span>";
  }
  function stance(prev, turn) {
    if (!prev || prev.answer === turn.answer) return ["", ""];
    var was = !!prev.correct, now = !!turn.correct, from = prev.answer === null ? "no answer" : prev.answer;
    var to = turn.answer === null ? " → no answer" : "";
    if (!was && now) return ["w2c", "wrong → right (was " + from + ")"];
    if (was && !now) return ["c2w", "right" + (to || " → wrong") + " (was " + from + ")"];
    return ["changed", "changed from " + from + to];
  }
  function peers(turn) {
    var info = turn.retrieved || {}, conf = info.confidence || {}, ann = turn.peer_confidence || info.annotation || {};
    var keys = {}; Object.keys(conf).concat(Object.keys(ann)).forEach(function (k) { keys[k] = 1; });
    var parts = Object.keys(keys).sort(function (a, b) { return a - b; }).map(function (p) {
      var label = ann[p]; return '<span class="' + esc(label || "") + '">' + esc("agent " + p + ": " + (label || "no annotation")
        + " (c = " + num(conf[p], 2) + ")") + "</span>"; });
    if (!parts.length) return "";
    return '<div class="peers">confidence in peers' + (info.confidence_shown === false ? " (not shown: w/o Confidence)" : "")
      + ": " + parts.join("; ") + "</div>";
  }
  function experiences(turn, run) {
    var info = turn.retrieved || {}, ids = info.case_ids || [];
    if (!Object.keys(info).length) return "";
    var shown = info.memory_shown === false ? "not shown (w/o Memory: confidence only)" : "shown in the prompt";
    var at = function (key, k) { var v = info[key] || []; return k < v.length ? v[k] : null; };
    var blocks = ids.map(function (id, k) {
      var c = (run.cases || {})[id];
      var numbers = '<span class="tag">reward <b>' + esc(at("rewards", k)) + "</b> · MMR score <b>" + num(at("scores", k))
        + "</b> · similarity " + num(at("similarities", k)) + "</span>";
      var detail = !c ? '<div class="tag">case text not available (memory bank not found)</div>'
        : "<div>its answer then " + badge(c.answer, c.correct) + ' <span class="tag">(round ' + esc(c.round) + ")</span> · reference <b>"
          + esc(c.gold) + "</b></div><details><summary>" + esc(c.question.split("\n")[0].slice(0, 90)) + "</summary><pre>"
          + esc(c.question) + "</pre></details>";
      return '<div class="case" data-case="' + esc(id) + '"><div class="cid">' + esc(id) + "</div>" + numbers + detail + "</div>";
    });
    return '<details class="experiences"><summary>' + ids.length + " experiences, λ_t = " + num(info.lambda, 2) + " ("
      + esc(info.policy) + "; " + shown + ")</summary>" + blocks.join("") + "</details>";
  }
  function grid(record, run) {
    var rounds = record.rounds, n = 0;
    rounds.forEach(function (r) { n = Math.max(n, r.agents.length); });
    var head = rounds.map(function (r) { return '<th data-round="' + r.round + '">round ' + r.round + "</th>"; }).join("");
    var rows = [];
    for (var i = 0; i < n; i++) {
      var cells = rounds.map(function (rnd, t) {
        var turn = rnd.agents.filter(function (a) { return a.agent === i; })[0];
        if (!turn) return "<td>–</td>";
        var prev = t === 0 ? null : rounds[t - 1].agents.filter(function (a) { return a.agent === i; })[0];
        var s = stance(prev, turn), tags = [];
        if (turn.truncated) tags.push("cut at max_tokens");
        if (turn.cut && turn.cut !== "max_tokens") tags.push(turn.cut.replace("_", " "));
        if (turn.visible_peers && rnd.masking) tags.push("saw agents " + (turn.visible_peers.join(", ") || "none"));
        return '<td class="turn ' + s[0] + '" data-round="' + rnd.round + '" data-agent="' + turn.agent + '">' + badge(turn.answer, turn.correct)
          + (s[1] ? '<span class="flip">' + esc(s[1]) + "</span>" : "")
          + tags.map(function (x) { return '<span class="tag">' + esc(x) + "</span>"; }).join("")
          + "<details><summary>response</summary><pre>" + esc(turn.response) + "</pre></details>" + peers(turn)
          + experiences(turn, run) + "</td>";
      }).join("");
      rows.push('<tr><td class="agent">agent ' + i + "</td>" + cells + "</tr>");
    }
    rows.push('<tr><td class="agent">consensus</td>' + rounds.map(function (r) {
      return "<td>" + num(r.consensus_ratio, 2) + (r.unanimous ? " (unanimous)" : "") + "</td>"; }).join("") + "</tr>");
    if (rounds.some(function (r) { return r.summary; })) rows.push('<tr><td class="agent">summary</td>' + rounds.map(function (r) {
      return r.summary ? "<td><pre>" + esc(r.summary) + "</pre></td>" : "<td>–</td>"; }).join("") + "</tr>");
    var v = record.vote || {};
    return '<div class="gridwrap"><table class="grid"><tr><th class="agent">agent</th>' + head + "</tr>" + rows.join("")
      + '</table></div><div class="final">final answer ' + badge(record.final_answer, record.correct) + " by " + esc(v.rule)
      + " vote (groups " + esc(JSON.stringify(v.group_sizes || [])) + (v.tied ? ", tie broken" : "") + ")"
      + (record.stopped_early ? "; stopped early (unanimous)" : "") + "</div>";
  }
  function withRecord(run, q, done) {
    var chunk = run.questions[q].chunk, key = run.key + "#" + chunk;
    load(run.base + "view.grids-" + chunk + ".js", function () {
      var record = (R2V.grids[key] || []).filter(function (r) { return r.sample_id === run.questions[q].id; })[0];
      if (!record) { fail("question " + run.questions[q].id + " missing from " + run.base + "view.grids-" + chunk + ".js"); return; }
      done(record);
    });
  }
  R2V.grid = grid;

  /* ---------- the index of runs ---------- */
  var INDEX_FILTERS = ["benchmark", "method", "model", "protocol", "variant", "engine"];
  function indexPage(app) {
    var data = R2V.index, runs = data.runs.slice(), picked = [];
    var filters = INDEX_FILTERS.map(function (f) {
      var values = {}; runs.forEach(function (r) { values[r[f]] = 1; });
      return '<label>' + f + ' <select id="f-' + f + '" data-filter="' + f + '"><option value="">all</option>'
        + Object.keys(values).sort().map(function (v) { return '<option value="' + esc(v) + '">' + esc(v) + "</option>"; }).join("")
        + "</select></label>";
    }).join(" ");
    app.innerHTML = "<h1>" + esc(data.title) + '</h1><p class="what">' + esc(data.what) + '</p><div id="r2v-error" class="error hidden"></div>'
      + '<div class="filters">' + filters + ' <label>search <input id="search" type="search" placeholder="name, settings, path, artifact"></label>'
      + ' showing <span id="count"></span> of ' + runs.length + '</div><div class="filters">pick two runs of one benchmark, then '
      + '<a id="compare" class="button disabled" href="#">compare them</a> <span id="pick-note"></span></div>'
      + '<div class="wide"><table class="list" id="runs"><thead><tr><th>pick</th><th data-sort="name">run</th><th data-sort="benchmark">benchmark</th>'
      + '<th data-sort="model">model</th><th data-sort="protocol">protocol</th><th data-sort="variant">variant / profile</th>'
      + '<th data-sort="engine">engine</th><th data-sort="n" class="num">n</th><th data-sort="accuracy" class="num">accuracy [95% CI]</th>'
      + '<th data-sort="tokens" class="num">tokens / question</th><th>details</th></tr></thead><tbody></tbody></table></div>';
    var body = app.querySelector("#runs tbody");
    function render() {
      var query = el("search").value, shown = 0, chosen = {};
      INDEX_FILTERS.forEach(function (f) { chosen[f] = el("f-" + f).value; });
      body.innerHTML = runs.map(function (r) {
        var hide = INDEX_FILTERS.some(function (f) { return chosen[f] && r[f] !== chosen[f]; })
          || !matches([r.name, r.settings, r.path, r.protocol, r.feeds.join(" ")].join(" "), query);
        if (!hide) shown += 1;
        return '<tr data-run="' + esc(r.path) + '"' + (hide ? ' class="hidden"' : "") + '><td><input type="checkbox" class="pick"'
          + (picked.indexOf(r.path) >= 0 ? " checked" : "") + '></td><td>' + (r.page ? '<a class="name" href="' + esc(r.page) + '">' + esc(r.name) + "</a>" : esc(r.name))
          + '<div class="path">' + esc(r.path) + "</div></td><td>" + esc(r.benchmark) + "</td><td>" + esc(r.model) + "</td><td>"
          + esc(r.protocol) + "</td><td>" + esc(r.variant) + "</td><td>" + esc(r.engine) + '</td><td class="num">' + r.n
          + '</td><td class="num">' + esc(r.accuracy_text) + '</td><td class="num">' + (r.tokens ? Math.round(r.tokens).toLocaleString("en") : "–")
          + "</td><td>" + details(r) + "</td></tr>";
      }).join("");
      el("count").textContent = String(shown);
      body.querySelectorAll("input.pick").forEach(function (box) {
        box.addEventListener("change", function () {
          var path = box.closest("tr").getAttribute("data-run");
          picked = picked.filter(function (p) { return p !== path; });
          if (box.checked) picked.push(path);
          if (picked.length > 2) picked.shift();
          render();
        });
      });
      var link = el("compare"), note = el("pick-note"), pair = picked.map(function (p) { return byPath(p); });
      link.classList.add("disabled"); link.setAttribute("href", "#");
      if (pair.length === 2 && pair[0].benchmark !== pair[1].benchmark) note.textContent = "the two runs are on different benchmarks";
      else if (pair.length === 2) { link.classList.remove("disabled");
        link.setAttribute("href", data.compare + "?a=" + encodeURIComponent(pair[0].path) + "&b=" + encodeURIComponent(pair[1].path));
        note.textContent = pair[0].name + " vs " + pair[1].name; }
      else note.textContent = picked.length + " picked";
    }
    function details(r) {
      return "<details><summary>" + (r.feeds.length ? "feeds " + r.feeds.length : "feeds nothing") + ", settings</summary>"
        + '<div class="tag">' + esc(r.settings) + "</div>" + (r.feeds.length ? "<ul>" + r.feeds.map(function (f) { return "<li>" + esc(f) + "</li>"; }).join("") + "</ul>" : "")
        + "</details>";
    }
    function byPath(p) { return data.runs.filter(function (r) { return r.path === p; })[0]; }
    sortable(app.querySelector("#runs"), runs, {name: function (r) { return r.name; }, benchmark: function (r) { return r.benchmark; },
      model: function (r) { return r.model; }, protocol: function (r) { return r.protocol; }, variant: function (r) { return r.variant; },
      engine: function (r) { return r.engine; }, n: function (r) { return r.n; }, accuracy: function (r) { return r.accuracy; },
      tokens: function (r) { return r.tokens; }}, render);
    app.querySelectorAll("select[data-filter]").forEach(function (s) { s.addEventListener("change", render); });
    el("search").addEventListener("input", render);
    el("compare").addEventListener("click", function (e) { if (el("compare").classList.contains("disabled")) e.preventDefault(); });
    render();
  }

  /* ---------- a run's questions ---------- */
  var Q_COLUMNS = {id: function (q) { return q.id; }, gold: function (q) { return q.gold; }, final: function (q) { return q.final; },
    correct: function (q) { return q.correct ? 1 : 0; }, changes: function (q) { return q.changes; }, w2c: function (q) { return q.w2c; },
    c2w: function (q) { return q.c2w; }, experiences: function (q) { return q.experiences; }, lambda: function (q) { return q.lambda; },
    confidence: function (q) { return q.confidence; }, noanswer: function (q) { return q.no_answer; }};
  function questionFilters() {
    return '<div class="filters"><label>correct <select id="f-correct"><option value="">all</option><option value="right">right</option>'
      + '<option value="wrong">wrong</option><option value="none">no final answer</option></select></label> '
      + '<label><input type="checkbox" id="f-w2c"> a flip wrong → right</label> <label><input type="checkbox" id="f-c2w"> a flip right → wrong</label> '
      + '<label><input type="checkbox" id="f-empty"> errors / empty answers</label> <label><input type="checkbox" id="f-overflow"> overflow / cut</label> '
      + '<label><input type="checkbox" id="f-shared"> shared misconception</label> '
      + '<label>search <input id="q-search" type="search" placeholder="question text, id, answer"></label> showing <span id="f-count"></span></div>';
  }
  function keep(q) {
    var c = el("f-correct").value;
    if (c === "right" && !q.correct || c === "wrong" && (q.correct || q.final === null) || c === "none" && q.final !== null) return false;
    if (el("f-w2c").checked && !q.w2c || el("f-c2w").checked && !q.c2w) return false;
    if (el("f-empty").checked && !q.no_answer && q.final !== null) return false;
    if (el("f-overflow").checked && !q.overflow) return false;
    if (el("f-shared").checked && !q.shared) return false;
    return matches([q.id, q.text, q.gold, q.final === null ? "no answer" : q.final].join(" "), el("q-search").value);
  }
  R2V.keep = keep;
  function questionCells(q) {
    return "<td>" + esc(q.id) + '</td><td class="qtext">' + esc(q.text.slice(0, 160)) + (q.text.length > 160 ? "…" : "")
      + "</td><td>" + esc(q.gold) + "</td><td>" + badge(q.final, q.correct) + '</td><td class="num">' + q.changes + '</td><td class="num">'
      + q.w2c + '</td><td class="num">' + q.c2w + '</td><td class="num">' + q.no_answer + '</td><td class="num">' + (q.experiences || "–")
      + '</td><td class="num">' + num(q.lambda, 2) + '</td><td class="num">' + num(q.confidence, 2) + "</td><td>"
      + [q.shared ? "shared misconception" : "", q.overflow ? "overflow / cut" : ""].filter(Boolean).join(", ") + "</td>";
  }
  var Q_HEAD = '<th data-sort="id">question</th><th>text</th><th data-sort="gold">reference</th><th data-sort="final">final answer</th>'
    + '<th data-sort="changes" class="num" title="turns whose answer differs from the agent\'s previous one">changes</th>'
    + '<th data-sort="w2c" class="num" title="stance changes from a wrong answer to the right one">wrong → right</th>'
    + '<th data-sort="c2w" class="num" title="stance changes from the right answer to a wrong one (or none)">right → wrong</th>'
    + '<th data-sort="noanswer" class="num" title="turns with no parsable answer">no answer</th>'
    + '<th data-sort="experiences" class="num" title="experiences retrieved (Eqs. 5-6), every agent and round">exp.</th>'
    + '<th data-sort="lambda" class="num" title="mean lambda_t of the retrievals (Eq. 6)">λ_t</th>'
    + '<th data-sort="confidence" class="num" title="mean confidence c in the peers (Eq. 7)">c</th><th>flags</th>';

  function runPage(app) {
    withRun(app.getAttribute("data-data"), function (run) {
      if (!run) { fail("no run data in " + app.getAttribute("data-data")); return; }
      var rows = run.questions.map(function (q, i) { q.index = i; return q; });
      document.title = "r2mad run: " + run.name;
      app.innerHTML = "<h1>" + esc(run.name) + '</h1><p class="what">' + esc(run.describe) + "</p>"
        + '<p class="what">' + esc(run.notes) + '</p><div id="r2v-error" class="error hidden"></div>' + questionFilters()
        + '<div class="wide"><table class="list" id="questions"><thead><tr>' + Q_HEAD + '</tr></thead><tbody></tbody></table></div><div id="detail"></div>';
      var body = app.querySelector("#questions tbody");
      function render() {
        var shown = 0;
        body.innerHTML = rows.map(function (q) { var ok = keep(q); if (ok) shown += 1;
          return '<tr data-q="' + esc(q.id) + '" data-index="' + q.index + '"' + (ok ? "" : ' class="hidden"') + ">" + questionCells(q) + "</tr>"; }).join("");
        el("f-count").textContent = shown + " of " + rows.length;
        body.querySelectorAll("tr").forEach(function (tr) { tr.addEventListener("click", function () { open(+tr.getAttribute("data-index")); }); });
      }
      function open(i) {
        var q = run.questions[i];
        withRecord(run, i, function (record) {
          el("detail").innerHTML = '<section class="q" data-q="' + esc(q.id) + '"><h2>' + esc(q.id) + " · reference " + esc(q.gold)
            + "</h2><details open><summary>question</summary><pre>" + esc(q.text) + '</pre></details><div class="run">' + grid(record, run) + "</div></section>";
          el("detail").scrollIntoView();
        });
      }
      sortable(app.querySelector("#questions"), rows, Q_COLUMNS, render);
      app.querySelectorAll(".filters input, .filters select").forEach(function (x) { x.addEventListener(x.type === "search" ? "input" : "change", render); });
      render();
    });
  }

  /* ---------- two runs compared ---------- */
  /* The 2x2 of two runs on their common questions: A's outcome by row, B's by column, every header centred over
     (or beside) its cells, and each cell named by what it counts, its number under its name. */
  var CELLS = [["both", "both right"], ["a", "only A right"], ["b", "only B right"], ["neither", "both wrong"]];
  function twoByTwo(counts) {
    function cell(k) {
      var kind = CELLS[k][0], name = CELLS[k][1];
      return '<td class="cell" data-kind="' + kind + '"><span class="cell-name">' + name + '</span><span class="num" id="c-'
        + kind + '">' + counts[kind] + "</span></td>";
    }
    return '<table id="twobytwo" class="twobytwo"><caption>The common questions by outcome: A by row, B by column</caption>'
      + '<thead><tr><td class="corner"></td><th scope="col">B right</th><th scope="col">B wrong</th><th scope="col">total</th></tr></thead>'
      + '<tbody><tr><th scope="row">A right</th>' + cell(0) + cell(1) + '<td class="total">' + (counts.both + counts.a) + "</td></tr>"
      + '<tr><th scope="row">A wrong</th>' + cell(2) + cell(3) + '<td class="total">' + (counts.b + counts.neither) + "</td></tr>"
      + '<tr><th scope="row">total</th><td class="total">' + (counts.both + counts.b) + '</td><td class="total">'
      + (counts.a + counts.neither) + '</td><td class="total">' + (counts.both + counts.a + counts.b + counts.neither)
      + "</td></tr></tbody></table>";
  }

  function comparePage(app) {
    var params = new URLSearchParams(location.search), a = params.get("a"), b = params.get("b");
    var runs = R2V.index.runs, ia = -1, ib = -1;
    runs.forEach(function (r, i) { if (r.path === a) ia = i; if (r.path === b) ib = i; });
    if (ia < 0 || ib < 0) { app.innerHTML = '<div id="r2v-error" class="error"></div>'; fail("pick two runs of the index (compare.html?a=RUN&b=RUN); not found: " + (ia < 0 ? a : b)); return; }
    var A = runs[ia], B = runs[ib];
    withRun(A.data, function (ra) { withRun(B.data, function (rb) {
      var byId = {}; rb.questions.forEach(function (q, i) { byId[q.id] = i; });
      var pairs = [], counts = {both: 0, a: 0, b: 0, neither: 0};
      ra.questions.forEach(function (q, i) {
        if (!(q.id in byId)) return; var qb = rb.questions[byId[q.id]];
        var kind = q.correct && qb.correct ? "both" : q.correct ? "a" : qb.correct ? "b" : "neither";
        counts[kind] += 1; pairs.push({id: q.id, i: i, j: byId[q.id], kind: kind, qa: q, qb: qb});
      });
      var key = Math.min(ia, ib) + "-" + Math.max(ia, ib), test = (R2V.index.pairs || {})[key];
      var first = ia < ib;  /* the index's test is of the run listed first (a) against the other (b) */
      var aOnly = test ? (first ? test.a_only : test.b_only) : null, bOnly = test ? (first ? test.b_only : test.a_only) : null;
      var accA = test ? (first ? test.accuracy_a : test.accuracy_b) : null, accB = test ? (first ? test.accuracy_b : test.accuracy_a) : null;
      if (!test) fail("no McNemar test for this pair in the index (runs on different benchmarks, or no common question)");
      else if (test.n !== pairs.length || aOnly !== counts.a || bOnly !== counts.b) fail("the 2x2 counted here (" + JSON.stringify(counts)
        + ") differs from the index's (" + JSON.stringify(test) + "): run `r2mad runs` again");
      var order = {a: 0, b: 1, both: 2, neither: 3};
      pairs.sort(function (x, y) { return order[x.kind] - order[y.kind] || x.i - y.i; });
      document.title = "r2mad: " + A.name + " vs " + B.name;
      app.innerHTML = "<h1>" + esc(A.name) + " vs " + esc(B.name) + '</h1><div id="r2v-error" class="error hidden"></div>'
        + '<p class="what">A: ' + esc(ra.describe) + '</p><p class="what">B: ' + esc(rb.describe) + "</p>"
        + twoByTwo(counts)
        + '<p class="what" id="mcnemar">' + (test ? pairs.length + " paired questions; exact McNemar p = <b id=\"p-value\">" + esc(test.p_text) + "</b> ("
          + esc(test.rule) + "); accuracy A " + num(accA) + ", B " + num(accB) : "") + "</p>"
        + '<div class="filters"><label>search <input id="q-search" type="search"></label> showing <span id="f-count"></span> · the questions where the runs end differently first</div>'
        + '<div class="wide"><table class="list" id="pairs"><thead><tr><th>question</th><th>text</th><th>reference</th><th>A</th><th>B</th><th>outcome</th></tr></thead><tbody>'
        + pairs.map(function (p) { return '<tr data-q="' + esc(p.id) + '" data-kind="' + p.kind + '"><td>' + esc(p.id) + '</td><td class="qtext">'
          + esc(p.qa.text.slice(0, 140)) + "</td><td>" + esc(p.qa.gold) + "</td><td>" + badge(p.qa.final, p.qa.correct) + "</td><td>"
          + badge(p.qb.final, p.qb.correct) + "</td><td>" + {a: "only A right", b: "only B right", both: "both right", neither: "both wrong"}[p.kind]
          + "</td></tr>"; }).join("") + '</tbody></table></div><div id="detail"></div>';
      function filter() { var query = el("q-search").value, shown = 0;
        app.querySelectorAll("#pairs tbody tr").forEach(function (tr, k) {
          var p = pairs[k], ok = matches([p.id, p.qa.text, p.qa.gold].join(" "), query); tr.classList.toggle("hidden", !ok); if (ok) shown += 1; });
        el("f-count").textContent = shown + " of " + pairs.length; }
      el("q-search").addEventListener("input", filter);
      app.querySelectorAll("#pairs tbody tr").forEach(function (tr, k) { tr.addEventListener("click", function () {
        var p = pairs[k];
        withRecord(ra, p.i, function (recA) { withRecord(rb, p.j, function (recB) {
          el("detail").innerHTML = '<section class="q" data-q="' + esc(p.id) + '"><h2>' + esc(p.id) + " · reference " + esc(p.qa.gold)
            + "</h2><details open><summary>question</summary><pre>" + esc(p.qa.text) + '</pre></details><div class="runs"><div class="run" data-side="a"><h3>A: '
            + esc(A.name) + "</h3>" + grid(recA, ra) + '</div><div class="run" data-side="b"><h3>B: ' + esc(B.name) + "</h3>" + grid(recB, rb) + "</div></div></section>";
          el("detail").scrollIntoView();
        }); });
      }); });
      filter();
    }); });
  }

  function start() {
    var app = el("r2v-app"); if (!app) return;
    var page = app.getAttribute("data-page");
    try {
      if (page === "index") load(app.getAttribute("data-index"), function () { indexPage(app); });
      else if (page === "compare") load(app.getAttribute("data-index"), function () { comparePage(app); });
      else if (page === "run") runPage(app);
    } catch (e) { fail(String(e && e.stack || e)); }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
