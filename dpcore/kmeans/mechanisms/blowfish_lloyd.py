"""Blowfish k-means (He, Machanavajjhala & Ding 2014): noisy Lloyd rounds with policy-graph sensitivities.

Guarantee: (eps, G)-Blowfish for the policy graph G: neighbours replace one row's value x by y for an edge
(x, y) of G, with public bounds. Counts get Lap(2 / eps_N), sums Lap(Delta_S(G) / eps_S)^d, Delta_S the
largest change of the cluster sums over G's edges given the previous public centres
(``dpcore.kmeans.blowfish``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpcore.accounts import Relation, graph_relation
from dpcore.errors import ParameterError, PolicyError
from dpcore.kmeans.blowfish import BlowfishKMeans, sensitivity_gain_bound
from dpcore.kmeans.mechanisms._lloyd import N_ITER, batched_trial, fit_release, rounds
from dpcore.kmeans.registry import KMEANS, METRICS, N_CLUSTERS, KMeansInputs, centroid_output
from dpcore.mechanisms import Sampler
from dpcore.policy import Blowfish, FullDomainGraph, Graph, graph_from_dict
from dpcore.registry import MechanismOutput, MechanismSpec, Param

KEY = "blowfish_lloyd"
FORMER_KEY = "blowfish"  # until the policy definition of that name was told apart from this mechanism
GAIN_EPS = 1.0  # the ε of the diagnostic run the page's note reports


def graph_of(policy: Any) -> dict:
    """The policy's Blowfish graph (as a dict); the full domain (= bounded DP) for any other policy."""
    return (policy.graph if isinstance(policy, Blowfish) else FullDomainGraph()).to_dict()

GRAPH = Param(
    "graph",
    "Blowfish policy graph",
    dict,
    None,
    help=(
        "Set by a Blowfish policy on the Privacy policy page (full domain, partition, distance threshold or "
        "attribute graph; any other policy: full domain, = bounded DP; in code: Graph.to_dict()). Graph "
        "distances (θ, block width) are in the scaled feature space prepared on the Data page; with min-max "
        "scaling, 1.0 = half the public range."
    ),
    from_policy=graph_of,
    choice_label=lambda graph: graph_from_dict(graph).label,
)


def policy_graph(params: dict) -> Graph:
    """The graph object of ``params["graph"]``; a ParameterError naming the problem otherwise."""
    try:
        return graph_from_dict(params["graph"])
    except PolicyError as err:
        raise ParameterError(f"Blowfish policy graph: {err}") from err


def build(
    epsilon: float, bounds: tuple[np.ndarray, np.ndarray], params: dict, random_state: Sampler
) -> BlowfishKMeans:
    """The unfitted estimator for the policy graph in ``params``."""
    return BlowfishKMeans(
        params["n_clusters"],
        epsilon,
        bounds=bounds,
        graph=policy_graph(params),
        n_iter=rounds(params),
        random_state=random_state,
    )


def release(
    inputs: KMeansInputs, *, epsilon: float, delta: float, params: dict, random_state: Sampler
) -> MechanismOutput:
    """Blowfish k-means fitted once: its final centres; the per-round gain over bounded DP in details."""
    est, details = fit_release(
        KEY, build, inputs, epsilon=epsilon, delta=delta, params=params, random_state=random_state
    )
    details["graph"] = est.graph.label
    # computed from the public bounds, the graph and released centres only: post-processing
    details["sensitivity_gain"] = [float(g) for g in np.atleast_1d(est.sensitivity_gain_)]
    return centroid_output(KEY, inputs, est.cluster_centers_, details)


def relation(params: Mapping[str, Any], policy: Any = None) -> Relation:
    """The relation of the policy graph in ``params``: one row's value replaced along one of its edges."""
    return graph_relation(policy_graph(params))


def note(inputs: KMeansInputs, params: Mapping[str, Any]) -> str:
    """Blowfish's noise against bounded DP in words: the graph's public ceiling and one diagnostic run at
    ``GAIN_EPS`` (diagnostic noise, never released)."""
    graph = policy_graph(params)
    head = (
        f"Noise of Blowfish with the {graph.label} graph, compared with bounded differential privacy "
        "(DP: one row's value replaced by any other): "
    )
    bounds = inputs.require_bounds(SPEC.label)
    ceiling = sensitivity_gain_bound(graph, *bounds)
    if ceiling < 1.005:
        return head + (
            "the same, so no gain over bounded DP here. A partition or distance-threshold graph protects "
            "less and adds less noise."
        )
    gains = blowfish_gain(inputs.X, params["n_clusters"], GAIN_EPS, bounds, graph, random_state=0)
    low, high = float(gains.min()), float(gains.max())
    if high < 1.005:
        run = "it gave no gain over bounded DP here"
    elif high < 1.005 * low:
        run = f"it added {high:.3g} times less noise in every round"
    else:
        run = f"it added {low:.3g} to {high:.3g} times less noise, depending on the round"
    return head + (
        f"the noise on the cluster sums can be up to {ceiling:.3g} times smaller with this graph; in a "
        f"diagnostic run at ε = {GAIN_EPS:g}, {run}."
    )


def trial(inputs: KMeansInputs, eps_grid: np.ndarray, trials: int, **kw: Any) -> np.ndarray:
    """Diagnostic noisy centres (E, trials, K, d), matched to the true centres."""
    return batched_trial(KEY, build, inputs, eps_grid, trials, **kw)


def blowfish_gain(
    X: np.ndarray,
    n_clusters: int,
    epsilon: float,
    bounds: tuple[Any, Any],
    graph: Graph,
    *,
    random_state: int | None = 0,
) -> np.ndarray:
    """Per-round sum-sensitivity gain (T,) of Blowfish over bounded DP in one diagnostic fit at ``epsilon``
    (``random_state`` seeds its diagnostic sampler).

    Bounded-DP Delta_S / Blowfish Delta_S (1 = no gain). It depends on the noisy centres of each round, so
    it is a diagnostic; the public ceiling is :func:`dpcore.kmeans.blowfish.sensitivity_gain_bound`.
    """
    inputs = KMeansInputs(X, None, *bounds)
    params = SPEC.validate_params({"n_clusters": n_clusters, "graph": graph.to_dict()})
    est = build(float(epsilon), inputs.require_bounds(SPEC.label), params, Sampler.diagnostic(random_state))
    return np.atleast_1d(np.asarray(est.fit(inputs.X).sensitivity_gain_, dtype=float))


SPEC = KMEANS.register(
    MechanismSpec(
        domain="kmeans",
        key=KEY,
        label="Blowfish k-means",
        definition="blowfish",
        summary=(
            "Runs the same noisy k-means rounds as DP-Lloyd under a Blowfish policy, which protects only "
            "the differences your policy graph connects (for example values closer than a distance θ), "
            "so it can add less noise than differential privacy."
        ),
        formula=(
            "As DP-Lloyd with neighbours that replace one row's value x by y for an edge (x, y) of the "
            "policy graph G: Δ_N = 2, and Δ_S = the largest change of the cluster sums over G's edges given "
            "the previous round's public centres (at most the bounded-DP value 2 Σ_i h_i; checked by "
            "brute-force enumeration of edges on small domains)."
        ),
        citation="He, Machanavajjhala & Ding 2014; Machanavajjhala & Kifer 2015",
        release=release,
        params=(N_CLUSTERS, N_ITER, GRAPH),
        trial=trial,
        metrics=METRICS,
        relation=relation,
        background_cost=1.0,
        out_of_core=release,  # fit_release runs the Lloyd passes of a LloydSource (dpcore.outofcore)
        note=note,
        color="#9467bd",
        aliases=(FORMER_KEY,),
    )
)
