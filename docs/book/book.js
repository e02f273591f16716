/* The book's reading aids (docs/build_book.py copies this file to assets/book.js; tests/test_book_browser.py
   checks what it does). On every page:
   - code folds: a notebook's code cell shows its input behind a one-click "Show code", except the parameters cell,
     papermill's injected cell and cells tagged "show-code" (a computation the text asks the reader to follow);
   - long tables get a compact view: a table of more than COMPACT_COLUMNS columns shows the columns that tell its
     rows apart (a column with one value says it once above the table) and, in a table of verdicts (the claims
     table, the paper comparison), the verdict columns (VERDICT_COLUMNS) beside them, each cell wrapped at a
     readable width, the rest behind "Show all N columns" (and in the table's CSV, linked under it);
   - a Markdown picture (docs/) becomes a figure with its alt text as the caption under it. */
(function () {
  "use strict";
  var COMPACT_COLUMNS = 7;
  var SHOWN_TAGS = ["celltag_parameters", "celltag_injected-parameters", "celltag_show-code"];

  function foldCode() {
    document.querySelectorAll(".jp-CodeCell").forEach(function (cell) {
      if (SHOWN_TAGS.some(function (tag) { return cell.classList.contains(tag); })) return;
      var input = cell.querySelector(":scope > .jp-Cell-inputWrapper");
      if (!input || input.closest("details.r2mad-fold")) return;
      var lines = (input.innerText || "").split("\n").filter(function (l) { return l.trim(); }).length;
      var fold = document.createElement("details");
      fold.className = "r2mad-fold";
      var summary = document.createElement("summary");
      summary.textContent = "Show code (" + lines + " line" + (lines === 1 ? "" : "s") + ")";
      fold.appendChild(summary);
      input.parentNode.insertBefore(fold, input);
      fold.appendChild(input);
    });
  }

  // The compact view of a table of more than COMPACT_COLUMNS columns: the columns a reader needs to tell its rows
  // apart. A column with one value in every row says it once, in the toggle's line ("model: Simulated"); of the
  // rest, the first KEEP_FIRST (the row labels) and the verdict columns (in VERDICT_COLUMNS' order) stay;
  // a table without a verdict column keeps its last KEEP_LAST (the values). Issue 61: the claims table's verdicts
  // were its 8th to 14th columns, off-screen in the compact view of its first 4 and last 6.
  var KEEP_FIRST = 4, KEEP_LAST = 6;
  var VERDICT_COLUMNS = ["outcome", "consistent", "significant", "verdict", "p_holm", "difference", "reproduced", "paper"];
  var LONG_CELL = 28;  // a cell of more characters wraps in the compact view; a shorter one stays on one line
  function compactTables() {
    document.querySelectorAll("article table").forEach(function (table) {
      var rows = Array.prototype.slice.call(table.rows);
      var header = rows.length ? rows[0] : null;
      if (!header || header.cells.length <= COMPACT_COLUMNS || table.classList.contains("r2mad-compactable")
          || table.classList.contains("r2mad-compact-view")) return;
      var total = header.cells.length;
      var grid = rows.map(function (row) { return Array.prototype.slice.call(row.cells); });
      var body = grid.slice(1).filter(function (cells) {  // the data rows: a full row with a <td>
        return cells.length === total && cells.some(function (c) { return c.tagName === "TD"; });
      });
      var constant = [], varying = [];
      for (var column = 0; column < total; column++) {
        var values = body.map(function (cells) { return cells[column].textContent.trim(); });
        var name = header.cells[column].textContent.trim();
        if (name && body.length > 1 && values.every(function (v) { return v === values[0]; })) constant.push(column);
        else varying.push(column);
      }
      var first = varying.slice(0, KEEP_FIRST), verdicts = [];
      VERDICT_COLUMNS.forEach(function (name) {  // in VERDICT_COLUMNS' order: the verdict first, its numbers after it
        varying.forEach(function (column) {
          if (first.indexOf(column) < 0 && header.cells[column].textContent.trim() === name) verdicts.push(column);
        });
      });
      var shown = verdicts.length ? first.concat(verdicts)
        : varying.length > KEEP_FIRST + KEEP_LAST ? first.concat(varying.slice(varying.length - KEEP_LAST)) : varying;
      if (shown.length === total) return;
      // The compact view is a table of its own (the shown columns, in that order), before the full table, which is
      // hidden until the toggle shows it instead.
      var compact = table.cloneNode(false);
      compact.removeAttribute("id");
      compact.classList.add("r2mad-compact-view");
      Array.prototype.forEach.call(table.children, function (section) {
        if (!/^(THEAD|TBODY|TFOOT)$/.test(section.tagName)) return;
        var part = section.cloneNode(false);
        Array.prototype.forEach.call(section.rows, function (row) {
          if (row.cells.length !== total) return;  // a header row with merged cells (an index's name): left out
          var copy = row.cloneNode(false);
          shown.forEach(function (column) {
            var cell = row.cells[column].cloneNode(true);
            if (cell.textContent.trim().length > LONG_CELL) cell.classList.add("r2mad-long");
            copy.appendChild(cell);
          });
          part.appendChild(copy);
        });
        compact.appendChild(part);
      });
      table.classList.add("r2mad-compactable");
      table.hidden = true;
      table.parentNode.insertBefore(compact, table);
      var anchor = compact;  // the toggle's line goes above both
      var said = constant.map(function (column) {
        return header.cells[column].textContent.trim() + ": " + (body[0][column].textContent.trim() || "(empty)");
      });
      var tools = document.createElement("div");
      tools.className = "r2mad-table-tools";
      var button = document.createElement("button");
      button.type = "button";
      var note = document.createElement("span");
      note.textContent = said.length ? " In every row: " + said.join("; ") + "." : "";
      function label() {
        button.textContent = table.hidden
          ? "Show all " + total + " columns (compact view: " + shown.length + ")"
          : "Compact view (" + shown.length + " of " + total + " columns)";
      }
      button.addEventListener("click", function () { table.hidden = !table.hidden; compact.hidden = !table.hidden; label(); });
      label();
      tools.appendChild(button);
      tools.appendChild(note);
      table.parentNode.insertBefore(tools, anchor);
    });
  }

  function captionPictures() {
    document.querySelectorAll("article img").forEach(function (img) {
      if (img.closest("figure") || img.closest(".jp-OutputArea") || !img.alt) return;
      var parent = img.parentElement;
      var figure = document.createElement("figure");
      figure.className = "r2mad-figure";
      var caption = document.createElement("figcaption");
      caption.textContent = img.alt;
      if (parent.tagName === "P" && parent.childNodes.length === 1) {
        parent.parentNode.replaceChild(figure, parent);
      } else {
        parent.insertBefore(figure, img);
      }
      figure.appendChild(img);
      figure.appendChild(caption);
    });
  }

  function ready() {
    foldCode();
    compactTables();
    captionPictures();
    document.documentElement.setAttribute("data-book-js", "done");
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready); else ready();
})();
