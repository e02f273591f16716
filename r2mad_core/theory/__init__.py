"""The theory of Section 4 and Appendix C: memory as evidence on a latent concept.

- :mod:`~r2mad_core.theory.model`: the latent-concept model, posteriors and log-odds.
- :mod:`~r2mad_core.theory.checks`: Proposition 4.1, Proposition 4.2, Lemma C.2 and Theorem C.3, checked numerically.
- :mod:`~r2mad_core.theory.simulation`: the multi-round Monte Carlo of debates under the model.
- :mod:`~r2mad_core.theory.agents`: the same model as an engine: simulated agents that read the real prompts
  (the ``simulated`` engine of the sim and tiny profiles; not a language model).
- :mod:`~r2mad_core.theory.agent_texts`: the texts those agents write (reasoning sentences by concept, fixed phrases).
"""
