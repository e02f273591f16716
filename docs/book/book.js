/* The book's reading aids (docs/build_book.py copies this file to assets/book.js; tests/test_book_browser.py
   checks what it does). On every page:
   - code folds: a notebook's code cell shows its input behind a one-click "Show code", except the parameters cell,
     papermill's injected cell and cells tagged "show-code" (a computation the text asks the reader to follow);
   - long tables get a compact view: more than COMPACT_COLUMNS columns shows the first ones, each cell on one line
     (its full text on hover), the rest behind "Show all N columns";
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

  function compactTables() {
    document.querySelectorAll("article table").forEach(function (table) {
      var header = table.rows.length ? table.rows[0] : null;
      if (!header || header.cells.length <= COMPACT_COLUMNS || table.classList.contains("r2mad-compactable")) return;
      var total = header.cells.length;
      table.classList.add("r2mad-compactable", "r2mad-compact");
      Array.prototype.forEach.call(table.rows, function (row) {
        var column = 0;
        Array.prototype.forEach.call(row.cells, function (cell) {
          if (column >= COMPACT_COLUMNS) cell.classList.add("r2mad-extra-column");
          if (!cell.title && cell.textContent.length > 40) cell.title = cell.textContent.trim();
          column += cell.colSpan || 1;
        });
      });
      var tools = document.createElement("div");
      tools.className = "r2mad-table-tools";
      var button = document.createElement("button");
      button.type = "button";
      function label() {
        button.textContent = table.classList.contains("r2mad-compact")
          ? "Show all " + total + " columns (compact view: the first " + COMPACT_COLUMNS + ")"
          : "Compact view (the first " + COMPACT_COLUMNS + " of " + total + " columns)";
      }
      button.addEventListener("click", function () { table.classList.toggle("r2mad-compact"); label(); });
      label();
      tools.appendChild(button);
      table.parentNode.insertBefore(tools, table);
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
