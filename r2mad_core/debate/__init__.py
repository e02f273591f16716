"""The debate (Du et al.'s multi-agent debate; paper Eqs. 1-2, Appendix A prompts).

- :mod:`~r2mad_core.debate.prompts`: every prompt an agent receives, written (personas, task, debate, summary, judge).
- :mod:`~r2mad_core.debate.prompt_parsing`: a written prompt read back (``parse_prompt``) or trimmed of an experience.
- :mod:`~r2mad_core.debate.authors_prompts`: the authors' code's prompt text, verbatim (``task_prompt="authors"``).
- :mod:`~r2mad_core.debate.settings`: the debate settings (``DebateSettings``), declared once: defaults, bounds,
  vocabularies and docs that the methods, the grid, memory construction and the CLI read.
- :mod:`~r2mad_core.debate.loop`: the round loop (``run_debate``), its state and per-turn records, round hooks.
- :mod:`~r2mad_core.debate.scheduling`: how many debates run at once against one engine (rounds vs questions).
- :mod:`~r2mad_core.debate.masking`: MAD-M2's peer selection (objective: lowest perplexity; subjective: a judge) and
  its decisions read back from transcripts.
- :mod:`~r2mad_core.debate.overflow`: what a prompt that does not fit the context gives (``overflow_policy``).
- :mod:`~r2mad_core.debate.vote`: the final answer (Appendix A's plurality vote, the authors' rule) and a transcript
  scored again without generation (re-vote, re-extract, truncated answers as missing).
"""
