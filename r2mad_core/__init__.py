"""r2mad_core: the thin core of the R2-MAD reproduction.

One module per concept of the paper (see DESIGN.md):
benchmarks, answers, prompts, engines, embeddings, memory, retrieval, confidence,
debate, methods, scoring, theory, experiments, report.
"""

__version__ = "0.1.0"
