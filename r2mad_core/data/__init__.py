"""Data: the benchmarks and their answers (paper Section 5.1, Appendix B).

- :mod:`~r2mad_core.data.sources`: the benchmark files: the packaged copies, a local folder or the Hub, checksums.
- :mod:`~r2mad_core.data.benchmarks`: ``Sample``, the train/test splits, ``load`` and the benchmark registry
  (``BENCHMARK_SPECS``, ``register_benchmark``).
- :mod:`~r2mad_core.data.answers`: answer extraction and checking (``extract_answer``, ``is_correct``).
- :mod:`~r2mad_core.data.verdicts`: math-verify's verdicts shared between processes (``make reproduce``'s kernels).
- :mod:`~r2mad_core.data.deadline`: a CPU-time deadline for math-verify's parses and comparisons in any thread (a
  worker process the kernel ends at the deadline).

The files themselves ship in ``packaged/``; ``reported_results.csv`` holds every number the paper reports.
"""
