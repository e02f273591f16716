"""Experiments: methods, run cells, memory construction and profiles (Section 5).

- :mod:`~r2mad_core.methods`: the method registry (CoT, SC, MAD, MAD-M2, R2-MAD, ICL-CoT, ablations).
- :mod:`~r2mad_lab.experiments.cell`: one run cell (a method on a benchmark with a model): resumable transcripts.
- :mod:`~r2mad_lab.experiments.run_reader`: finished run directories read back once per process, with their metrics.
- :mod:`~r2mad_lab.experiments.metrics`: a run's ``metrics.json``: accuracy with its CI, cost per query, completion
  health, the summary line.
- :mod:`~r2mad_lab.experiments.statistics`: a run's accuracy CI (bootstrap, or the exact Clopper-Pearson one below
  the small-sample n).
- :mod:`~r2mad_lab.experiments.transcripts`: the transcript store (``transcripts.jsonl``: crash-safe appends, lines
  read back validated).
- :mod:`~r2mad_lab.experiments.build_memory`: the training-split debates that fill the banks.
- :mod:`~r2mad_lab.experiments.engine_pool`: one engine per model of a grid, opened on first need, closed together.
- :mod:`~r2mad_lab.experiments.waiting`: work ordered around other processes' locks (what another holds goes last).
- :mod:`~r2mad_lab.experiments.run_settings`: ``RunSettings``, a run's settings carried whole from the profile.
- :mod:`~r2mad_lab.experiments.method_labels`: the paper's row names -> registered methods and options (the
  run settings flattened, once).
- :mod:`~r2mad_lab.experiments.model_specs`: the models of a profile (engine, model, stand-ins).
- :mod:`~r2mad_lab.experiments.profile_schema`: the typed profile schema (``ProfileSpec``): fields, bounds, rules.
- :mod:`~r2mad_lab.experiments.profiles`: how a profile is loaded and how overrides land on it
  (``Profile.with_overrides``).
- :mod:`~r2mad_lab.experiments.profile_text`: a profile's text read (YAML numbers, ``${NAME}``, ``--set KEY=VALUE``).
- :mod:`~r2mad_lab.experiments.protocol`: the protocol presets (paper, authors): every open choice and its evidence.
- :mod:`~r2mad_lab.experiments.budget`: request, token and price estimates and caps for paid runs.
- :mod:`~r2mad_lab.experiments.progress`: the progress line of long work (runs done, current work, time left) on a
  terminal or in a log.
"""
