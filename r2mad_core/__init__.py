"""r2mad_core: the thin core of the R2-MAD reproduction.

One module per concept of the paper, bottom layer first (tests/test_architecture.py holds the layers):
data and registries (benchmark_files, benchmarks, retrieval, plugins, files, records), answers and prompts,
engines (base, cache, simulated, local, openai_compat, vllm_backend), embeddings, memory_cases (Eqs. 2, 4),
memory (the banks M_i), memory_audit, confidence (Eqs. 5-7), debate (Eqs. 1-2), scheduling, scoring,
r2mad (the R2-MAD round hook), methods, experiments (one run cell), method_labels, memory_construction,
model_specs, grid and grid_results (the notebooks' run cells), profile_schema, findings, tables, artifacts,
report, reproduce (make reproduce), budget, cli; theory, theory_checks and theory_simulation (Section 4 and
Appendix C).
"""

__version__ = "0.1.0"
