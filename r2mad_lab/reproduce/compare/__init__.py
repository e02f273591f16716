"""Comparing the points of an ablation: each table against the profile's, across a sweep, across the seeds.

The points (:mod:`r2mad_lab.reproduce.points`) write their tables; these modules read them back and compare them
with the statistics of docs/statistics.md (:mod:`r2mad_lab.report.inference`):

- :mod:`~r2mad_lab.reproduce.compare.tables`: a point's tables read back: the tidy CSVs, the per-question outcomes of
  the runs a table's cells name, two folders' plain numbers cell by cell;
- :mod:`~r2mad_lab.reproduce.compare.variant`: a variant's table against the profile's, cell by cell, on the same
  questions (``<table>_vs_profile``, :func:`~r2mad_lab.reproduce.compare.variant.compare_table`), and its overrides
  read back from the runs that executed;
- :mod:`~r2mad_lab.reproduce.compare.sweep`: a sweep's tests (each point against the profile's point, the trend
  along each numeric axis), its table and its figure;
- :mod:`~r2mad_lab.reproduce.compare.replicate`: the replicate summary (mean and spread across seeds beside one
  seed's CI) and a variant against its profile across the seeds.
"""
