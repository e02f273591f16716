"""The report: results turned into what the notebooks show (tables, figures, the claims, the comparison).

The paper's tables and figures, the claims, the comparison; it runs nothing (the cells are run by
:mod:`r2mad_lab.reproduce`).

- :mod:`~r2mad_lab.report.results`: a grid's results as tables and plot frames (``GridResults``).
- :mod:`~r2mad_lab.report.tables`: one ``Table`` type rendered as CSV, Markdown and LaTeX.
- :mod:`~r2mad_lab.report.artifacts`: writing tables and figures with their manifest (what ran, at which commit).
- :mod:`~r2mad_lab.report.stances`: stance transitions (Table 3) and the shared-misconception subset (RQ4).
- :mod:`~r2mad_lab.report.subset_tables`: notebook 06's tables: the subset's accuracy, Tables 4 and 7, round 0.
- :mod:`~r2mad_lab.report.findings`: the generated "What this shows" text.
- :mod:`~r2mad_lab.report.grid_notes`: a grid in words: the notebooks' settings table, the captions' notes.
- :mod:`~r2mad_lab.report.protocol_notes`: the generated text on what the protocol preset changed.
- :mod:`~r2mad_lab.report.comparison`: the reproduction against the paper's numbers, the claims with McNemar.
- :mod:`~r2mad_lab.report.multiplicity`: Holm's adjustment of the p-values of tests made at once (a variant's cells, the
  claims).
- :mod:`~r2mad_lab.report.inference`: the one inference rule (docs/statistics.md): paired estimate with its CI, exact
  McNemar / stratified sign test, Holm family, verdict words only from the adjusted p, the small-sample n, trends.
- :mod:`~r2mad_lab.report.consistency`: the checker of the one inference rule across outputs: one record per
  comparison, no verdict below the cutoff, no bold without a test.
- :mod:`~r2mad_lab.report.intervals`: score and exact intervals (Wilson, MOVER/Newcombe for the difference from the
  paper's number, the exact paired interval that agrees with McNemar) and the SE printed beside every CI.
- :mod:`~r2mad_lab.report.overlap`: near-identical rows, the share of retrievals with the same cases, named in a
  table's caption.
- :mod:`~r2mad_lab.report.mcnemar`: the exact power of McNemar's test and the minimum detectable effect.
- :mod:`~r2mad_lab.report.power`: the claims' power: the smallest difference a run can detect, before the run, at the
  Holm-adjusted level.
- :mod:`~r2mad_lab.report.viewer`: a run's debates as one self-contained HTML page (``r2mad view``) or inline in a
  notebook: rounds x agents, stance changes, retrieved experiences, peer confidences, MAD-M2 masking.
- :mod:`~r2mad_lab.report.run_index`: every run of a profile (``r2mad runs``), named by its executed configuration:
  benchmark, model, protocol, n, accuracy with CI, tokens, the artifacts it feeds (the manifests' ``runs``), the
  exact McNemar test of every two runs of one benchmark (the claims table's).
- :mod:`~r2mad_lab.report.run_pages`: the index's light pages: a run's questions and debates as data files beside one
  shared viewer script (``viewer_assets/``), sorted, filtered, searched, two runs compared.
- :mod:`~r2mad_lab.report.volatile`: what differs between two runs with the same results (clocks, progress bars,
  times, commits), kept out of the tracked files so that such a rerun leaves git clean.
- :mod:`~r2mad_lab.report.headline`: the paper's Table 1 beside this run's values, printed at the end of reproduce.
- :mod:`~r2mad_lab.report.worked_state`: one debate state of an R2-MAD run read back (state, embedding, bank, what
  the run recorded) for notebook 04's by-hand computation of Eqs. 5-7.
"""
