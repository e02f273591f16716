"""\
The paper run on GPUs: everything ``reproduce --profile paper`` does beyond running the notebooks (docs/paper-run.md).

- :mod:`~r2mad_lab.reproduce.paper.command`: the options (``--rehearse``, ``--estimate-only`` from the rehearsal,
  ``--preflight``, ``--calibrate``, ``--gpus N``, ``--gpu-hour-price``, ``--skip-api-models``) and what each runs.
- :mod:`~r2mad_lab.reproduce.paper.rehearsal`: ``--rehearse``: every notebook of a GPU profile with each model behind
  a stand-in (its context and reply lengths), on the CPU, every request logged, keyed by what it rehearsed.
- :mod:`~r2mad_lab.reproduce.paper.estimate`: ``--estimate-only``: the rehearsal's requests scaled to the full splits,
  in GPU-hours and money (per-kind prices stated as assumptions with their sources, API tokens at the profile's prices).
- :mod:`~r2mad_lab.reproduce.paper.throughput`: the modelled tokens/s per model and GPU kind (KV-cache capacity,
  bandwidth, prefill), with sources.
- :mod:`~r2mad_lab.reproduce.paper.calibrate`: ``--calibrate``: tokens/s measured on the user's GPU (optionally with
  vLLM's dummy weights), stored beside the cache and validated when read.
- :mod:`~r2mad_lab.reproduce.paper.preflight`: the node as the driver reports it (vLLM, CUDA devices and their free
  memory), gated access, disk and API variables, before any GPU work.
- :mod:`~r2mad_lab.reproduce.paper.serve`: ``--gpus N``: vLLM's OpenAI-compatible servers started, health-checked and
  stopped by the run, requests spread over them.
- :mod:`~r2mad_lab.reproduce.paper.together`: ``--gpus N``: the notebooks' grids of every served model side by side
  (one thread per model) before the notebooks, so every model's servers have work.

Nothing here is imported by ``r2mad_lab.reproduce`` on import; :mod:`r2mad_lab.reproduce.command` imports
:mod:`.command` when its parser is built.
"""
