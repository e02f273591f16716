"""Exports: a run's records in the field's formats, read back from what executed (docs/elsewhere.md).

A run folder (``config.json``, ``transcripts.jsonl``, ``metrics.json``) is r2mad's own layout; these modules write
what it holds in the two formats an LLM-evaluation researcher already reads, from the package's own readers
(:mod:`r2mad_core.records`, :func:`r2mad_lab.experiments.cell.load_run`, :mod:`r2mad_lab.report.run_index`):

- :mod:`~r2mad_lab.export.source`: one run folder read and checked for export (damaged, incomplete or from another
  version: one :class:`~r2mad_lab.export.source.ExportError` line naming the file and the field), its machine
  paths made relative.
- :mod:`~r2mad_lab.export.table`: the tidy per-question table, one row per question x method x model x variant x
  replicate (Parquet; ``figures/<profile>/samples.parquet``).
- :mod:`~r2mad_lab.export.inspect_log`: one Inspect eval log (``.eval``, through ``inspect_ai.log.write_eval_log``;
  the optional ``inspect`` extra) per (benchmark, method, model, variant), its replicates as epochs: a debate of
  Eqs. 1-2 as messages, model events and spans per round and agent, the vote as the score.
"""
