"""The API budget guard of a reproduction: a profile with ``api_budget: true`` estimated, then run under a cap.

Before anything is sent, the notebooks run once against an estimating gateway
(:class:`~r2mad_lab.experiments.budget.EstimatingGateway`, :func:`estimate_cost`) and the requests, tokens and (with
prices) money are printed per notebook and in total; then the real run goes through a forwarding gateway with the
budget cap (:func:`run_guarded`: ``--max-requests``, ``--max-cost`` or ``$R2MAD_API_MAX_REQUESTS``,
``$R2MAD_API_MAX_COST``), which stops cleanly and resumably (:func:`budget_main`). The guarded endpoints come from
the environment (:func:`guarded_endpoints`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_lab.engines.endpoints import without_userinfo
from r2mad_lab.experiments.budget import BudgetCap, EstimatingGateway, ForwardingGateway, Prices, Usage, format_estimate
from r2mad_lab.experiments.profiles import Profile, ProfileError
from r2mad_lab.reproduce.notebook_runner import NotebookResult


def guarded_endpoints(profile: Profile) -> dict[str, list[str]]:
    """``base_url_env`` -> the endpoint URLs it holds (comma-separated), for every ``openai`` model of
    a profile with ``api_budget: true``. A variable that is not set is a :class:`ProfileError`."""
    if not profile.fields.get("api_budget"):
        return {}
    endpoints: dict[str, list[str]] = {}
    for group in ("models", "large_models"):
        for position, entry in enumerate(profile[group]):
            variable = entry.get("base_url_env")
            if entry.get("engine") != "openai" or not variable:
                continue
            urls = [u.strip() for u in os.environ.get(variable, "").split(",") if u.strip()]
            if not urls:
                raise ProfileError(
                    f"{profile.source}: field '{group}[{position}].base_url_env': the environment variable "
                    f"{variable} is not set; export the endpoint's base URL(s), e.g. {variable}=http://host:8000/v1 "
                    f"(several: comma-separated)"
                )
            endpoints[variable] = urls
    return endpoints


def _env_number(variable: str, kind: type) -> Any:
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ProfileError(f"environment variable {variable}: expected a number >= 0, found {text!r}") from None
    if not value >= 0:
        raise ProfileError(f"environment variable {variable}: expected a number >= 0, found {text!r}")
    return value


@contextlib.contextmanager
def temporary_environment(values: Mapping[str, str]) -> Any:
    """The environment variables ``values`` set for the block, each restored (or removed) after it."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def estimate_cost(
    profile: Profile, paths: Any, endpoints: Mapping[str, Sequence[str]], prices: Any,
    run_notebooks: Callable[..., list[NotebookResult]], *,
    notebooks_dir: Path | None = None, only: Sequence[str] | None = None, echo: Callable[[str], None] = print,
) -> tuple[dict[str, Any], NotebookResult | None]:
    """Run the notebooks once against :class:`~r2mad_lab.experiments.budget.EstimatingGateway` (in a scratch
    output folder) and return the usage per notebook, plus the failed notebook if one failed."""
    per_notebook: dict[str, Usage] = {}
    with EstimatingGateway() as gateway, tempfile.TemporaryDirectory(prefix="r2mad-estimate-") as scratch:
        before = [gateway.snapshot()]

        def record(result: NotebookResult) -> None:
            now = gateway.snapshot()
            per_notebook[result.notebook] = now.minus(before[0])
            before[0] = now

        scratch_paths = type(paths)(Path(scratch), profile.folder, paths.data_dir)  # the same layout, elsewhere
        with temporary_environment({variable: gateway.base_url for variable in endpoints}):
            results = run_notebooks(profile, scratch_paths, notebooks_dir=notebooks_dir, only=only,
                                    echo=lambda line: None, after_notebook=record)
    failed = results[-1] if results and results[-1].error else None
    return per_notebook, failed


def run_guarded(
    profile: Profile, paths: Any, endpoints: Mapping[str, Sequence[str]], cap: Any,
    run_notebooks: Callable[..., list[NotebookResult]], *,
    notebooks_dir: Path | None = None, only: Sequence[str] | None = None, echo: Callable[[str], None] = print,
) -> list[NotebookResult]:
    """Run the notebooks with every guarded endpoint behind a :class:`~r2mad_lab.experiments.budget.ForwardingGateway`
    sharing the budget ``cap``."""
    gateways = {variable: ForwardingGateway(urls, cap) for variable, urls in endpoints.items()}
    with contextlib.ExitStack() as stack:
        for variable, gateway in gateways.items():
            stack.enter_context(gateway)
            stack.callback(lambda v=variable, g=gateway: echo(f"reproduce: requests per endpoint of {v}: "
                                                              f"{g.pool.summary()}"))
        with temporary_environment({variable: gateway.base_url for variable, gateway in gateways.items()}):
            return run_notebooks(profile, paths, notebooks_dir=notebooks_dir, only=only, echo=echo, show_banner=False)


def budget_main(
    args: argparse.Namespace, profile: Profile, paths: Any, endpoints: Mapping[str, Sequence[str]],
    only: Sequence[str] | None, run_notebooks: Callable[..., list[NotebookResult]], banner: Sequence[str],
) -> int | list[NotebookResult]:
    """The estimate, then the capped run; an exit code when it stops early, else the results. ``run_notebooks``: the
    runner's (:func:`r2mad_lab.reproduce.command.run_notebooks`); ``banner``: the profile's first lines."""
    prices = Prices(
        args.price_prompt if args.price_prompt is not None else _env_number("R2MAD_API_PRICE_PROMPT", float),
        args.price_completion if args.price_completion is not None
        else _env_number("R2MAD_API_PRICE_COMPLETION", float),
    )
    max_requests = args.max_requests if args.max_requests is not None else _env_number("R2MAD_API_MAX_REQUESTS", int)
    max_cost = args.max_cost if args.max_cost is not None else _env_number("R2MAD_API_MAX_COST", float)
    try:
        cap = BudgetCap(max_requests=max_requests, max_cost=max_cost, prices=prices)
    except ValueError as exc:
        raise ProfileError(
            f"budget: {exc} (--price-prompt/--price-completion or R2MAD_API_PRICE_PROMPT/_COMPLETION)") from None
    for line in banner:
        print(line)
    described = "; ".join(f"{variable}={','.join(map(without_userinfo, urls))}" for variable, urls in endpoints.items())
    print(f"reproduce: endpoints {described}; budget cap: {cap.describe()}")
    if not args.no_estimate:
        print("reproduce: estimating the cost (the notebooks run once against a local estimating gateway; "
              "nothing is sent) ...")
        per_notebook, failed = estimate_cost(profile, paths, endpoints, prices, run_notebooks,
                                             notebooks_dir=args.notebooks_dir, only=only)
        if failed is not None:
            print(f"reproduce: the estimate failed in {failed.notebook}: {failed.error}", file=sys.stderr)
            return 1
        print("reproduce: cost estimate before anything is sent (upper bound: every debate runs all rounds, "
              "every completion max_tokens long; prompt tokens = characters/4; requests already in the "
              "response cache are not sent again):")
        for line in format_estimate(per_notebook, prices):
            print(line)
        if args.estimate_only:
            print("reproduce: --estimate-only: nothing sent")
            return 0
    results = run_guarded(profile, paths, endpoints, cap, run_notebooks, notebooks_dir=args.notebooks_dir, only=only)
    spent = cap.spent.describe(prices).replace("<= ", "").replace("~", "")
    if cap.refused:
        print(
            f"reproduce: stopped by the budget cap ({cap.describe()}): {spent} sent; {cap.refused} request(s) "
            f"refused before sending. Everything finished is kept (response cache {paths.cache_dir}, runs "
            f"{paths.runs_dir}); rerun with a higher cap to resume (cached requests are not sent again).",
            file=sys.stderr,
        )
        return 1
    print(f"reproduce: sent through the budget gateway: {spent}")
    return results
