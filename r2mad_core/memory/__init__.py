"""R2-MAD's memory: remember past debates, retrieve with the debate state, reweight peers (Sections 3.2-3.4).

- :mod:`~r2mad_core.memory.settings`: what R2-MAD adds, declared once (``MemorySettings``: K, Eq. 6's tradeoff,
  the fixed lambda, w_h/w_l, experience length), with defaults, bounds and doc lines; every other place reads it.
- :mod:`~r2mad_core.memory.embeddings`: the encoders of states (MiniLM packaged, BGE-M3 by name, a hashing one).
- :mod:`~r2mad_core.memory.cases`: the debate state s_i^(t) (Eq. 2) and the memory case m (Eq. 4) with reward r_i.
- :mod:`~r2mad_core.memory.banks`: the per-agent banks M_i: build, poison, save and load.
- :mod:`~r2mad_core.memory.retrieval`: debate-state-aware MMR (Eqs. 5-6, lambda_t falls with the consensus) and
  the policy registry (``POLICIES``, ``register_policy``; ``mmr_policy`` for a new MMR variant).
- :mod:`~r2mad_core.memory.inert`: which retrieval settings are inert given the others (gamma and the fixed lambda at
  K = 1); a sweep over an inert one is refused before it runs.
- :mod:`~r2mad_core.memory.confidence`: peer reliability from retrieved cases (Eq. 7) and its annotation.
- :mod:`~r2mad_core.memory.hook`: the R2-MAD round hook that ties them into the debate loop.
- :mod:`~r2mad_core.memory.diagnostics`: what the transcripts record about retrieval and confidence (lambda_t by
  consensus, the peer confidences, the annotations against the peers' correctness).
- :mod:`~r2mad_core.memory.audit`: the Limitations audit of a bank (mislabelled cases, near duplicates).
"""
