"""Tests for dpcore.policy: validation messages, helper formulas, graph edges and serialisation."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from dpcore.errors import PolicyError
from dpcore.location.geometry import EARTH_RADIUS_M
from dpcore.policy import (
    DEFINITIONS,
    ApproxDP,
    AttributeGraph,
    Blowfish,
    DistanceThresholdGraph,
    FullDomainGraph,
    GeoIndistinguishability,
    LocalPDP,
    PartitionGraph,
    PureDP,
    geo_radius_cdf,
    geo_radius_quantile,
    graph_from_dict,
    make_policy,
    odds_bound,
    policy_from_dict,
    truthful_probability,
)

BAD_EPSILONS = [
    (0, "0"),
    (-1, "-1"),
    (float("nan"), "nan"),
    (float("inf"), "inf"),
    (True, "True"),
    ("1", "'1'"),
]
BAD_DELTAS = [(0, "0"), (1, "1"), (1.5, "1.5"), (float("nan"), "nan"), (None, "None")]

EPSILON_CONSTRUCTORS = [
    lambda e: PureDP(e),
    lambda e: ApproxDP(e, 1e-6),
    lambda e: LocalPDP(e, 1e-6),
    lambda e: Blowfish(e, FullDomainGraph()),
    lambda e: make_policy("pure_dp", epsilon=e),
    truthful_probability,
    odds_bound,
]

ALL_POLICIES = [
    PureDP(1.0),
    PureDP(0.5, neighbours="bounded"),
    ApproxDP(1.0, 1e-6),
    ApproxDP(2.0, 1e-8, neighbours="bounded"),
    LocalPDP(1.0, 1e-5),
    Blowfish(1.0, FullDomainGraph()),
    Blowfish(0.5, PartitionGraph(10.0)),
    Blowfish(1.0, DistanceThresholdGraph(2.5, metric="l1")),
    Blowfish(1.0, DistanceThresholdGraph(5000.0, metric="haversine")),
    Blowfish(1.0, AttributeGraph(2)),
    GeoIndistinguishability.from_level(1.0, 200.0),
]


def _cdf(eps: float, r: float) -> float:
    """C_eps(r) as written in docs/mathematics.md (independent of the module's stable form)."""
    return 1.0 - (1.0 + eps * r) * math.exp(-eps * r)


# --- validation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", EPSILON_CONSTRUCTORS)
@pytest.mark.parametrize(("value", "shown"), BAD_EPSILONS)
def test_bad_epsilon_rejected_with_range_and_fix(build, value, shown):
    with pytest.raises(PolicyError) as err:
        build(value)
    msg = str(err.value)
    assert msg.startswith("epsilon must be a finite number > 0")
    assert f"(got {shown})" in msg
    assert "such as 1.0" in msg


def test_epsilon_message_matches_contract_example():
    with pytest.raises(PolicyError) as err:
        PureDP(0)
    assert (
        str(err.value) == "epsilon must be a finite number > 0 (got 0). Pick a positive epsilon such as 1.0."
    )


@pytest.mark.parametrize("build", [lambda d: ApproxDP(1.0, d), lambda d: LocalPDP(1.0, d)])
@pytest.mark.parametrize(("value", "shown"), BAD_DELTAS)
def test_bad_delta_rejected(build, value, shown):
    with pytest.raises(PolicyError) as err:
        build(value)
    msg = str(err.value)
    assert "delta must be in (0, 1)" in msg
    assert "typical values are below 1/n" in msg
    assert f"(got {shown})" in msg


@pytest.mark.parametrize("theta", [0, -5.0, float("nan"), float("inf")])
def test_bad_theta_rejected(theta):
    with pytest.raises(PolicyError, match=r"theta must be a finite number > 0 \(got"):
        DistanceThresholdGraph(theta)


@pytest.mark.parametrize("width", [0, -1.0, float("nan")])
def test_bad_block_width_rejected(width):
    with pytest.raises(PolicyError, match=r"block_width must be a finite number > 0 \(got"):
        PartitionGraph(width)


@pytest.mark.parametrize(("c", "shown"), [(0, "0"), (-2, "-2"), (1.5, "1.5"), (True, "True"), ("2", "'2'")])
def test_bad_c_rejected(c, shown):
    with pytest.raises(PolicyError) as err:
        AttributeGraph(c)
    assert str(err.value).startswith(f"c must be a whole number >= 1 (got {shown})")


def test_whole_float_c_is_normalised_to_int():
    graph = AttributeGraph(2.0)
    assert graph.c == 2
    assert type(graph.c) is int


def test_bad_metric_rejected():
    with pytest.raises(PolicyError) as err:
        DistanceThresholdGraph(1.0, metric="cosine")
    assert str(err.value) == "metric must be one of 'l1', 'l2', 'haversine' (got 'cosine')."


@pytest.mark.parametrize("build", [lambda n: PureDP(1.0, n), lambda n: ApproxDP(1.0, 1e-6, n)])
def test_bad_neighbours_rejected(build):
    with pytest.raises(PolicyError) as err:
        build("replace")
    assert str(err.value) == "neighbours must be one of 'unbounded', 'bounded' (got 'replace')."


@pytest.mark.parametrize(
    "build", [lambda k: make_policy(k, epsilon=1.0), lambda k: policy_from_dict({"definition": k})]
)
def test_bad_definition_key_rejected(build):
    with pytest.raises(PolicyError) as err:
        build("dp")
    msg = str(err.value)
    assert msg.startswith(
        "definition must be one of 'pure_dp', 'approx_dp', 'local_pdp', 'blowfish', 'geo_ind'"
    )
    assert "(got 'dp')" in msg


@pytest.mark.parametrize("graph", [None, "partition", {"kind": "partition", "block_width": 1.0}])
def test_blowfish_needs_a_graph_object(graph):
    with pytest.raises(PolicyError, match=r"graph must be one of FullDomainGraph, PartitionGraph"):
        Blowfish(1.0, graph)


@pytest.mark.parametrize("eps", [0, -0.01, float("nan"), float("inf"), True])
def test_bad_geo_epsilon_rejected(eps):
    with pytest.raises(PolicyError, match=r"epsilon_per_metre must be a finite number > 0 .*from_level"):
        GeoIndistinguishability(eps)


@pytest.mark.parametrize(
    ("level", "radius", "name"), [(0, 100, "level"), (1, 0, "radius_m"), (1, -5, "radius_m")]
)
def test_bad_from_level_rejected(level, radius, name):
    with pytest.raises(PolicyError, match=rf"^{name} must be a finite number > 0"):
        GeoIndistinguishability.from_level(level, radius)


@pytest.mark.parametrize("q", [0, 1, 1.5, -0.1, float("nan"), "x", [0.5, 1.0], []])
def test_bad_quantile_rejected(q):
    with pytest.raises(PolicyError, match=r"q must be a probability in \(0, 1\)"):
        geo_radius_quantile(0.01, q)


def test_policies_are_frozen_and_values_normalised_to_float():
    policy = ApproxDP(np.float64(2), np.float32(1e-6))
    assert type(policy.epsilon) is float and type(policy.delta) is float
    assert policy.epsilon == 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.epsilon = 3.0  # type: ignore[misc]
    assert PureDP(3).epsilon == 3.0 and type(PureDP(3).epsilon) is float


# --- make_policy ------------------------------------------------------------------------------------------


def test_make_policy_builds_every_definition():
    graph = PartitionGraph(5.0)
    assert make_policy("pure_dp", epsilon=1.0, neighbours="bounded") == PureDP(1.0, "bounded")
    assert make_policy("pure_dp", epsilon=1.0, delta=0) == PureDP(1.0)
    assert make_policy("approx_dp", epsilon=1.0, delta=1e-6) == ApproxDP(1.0, 1e-6)
    assert make_policy("local_pdp", epsilon=1.0, delta=1e-6) == LocalPDP(1.0, 1e-6)
    assert make_policy("blowfish", epsilon=1.0, graph=graph) == Blowfish(1.0, graph)
    assert make_policy("geo_ind", epsilon_per_metre=0.01) == GeoIndistinguishability(0.01)
    assert list(DEFINITIONS) == ["pure_dp", "approx_dp", "local_pdp", "blowfish", "geo_ind"]
    for key, (label, description) in DEFINITIONS.items():
        assert label and description
        assert make_policy(key, **_params(key)).definition == key


def _params(key: str) -> dict:
    return {
        "pure_dp": {"epsilon": 1.0},
        "approx_dp": {"epsilon": 1.0, "delta": 1e-6},
        "local_pdp": {"epsilon": 1.0, "delta": 1e-6},
        "blowfish": {"epsilon": 1.0, "graph": AttributeGraph()},
        "geo_ind": {"epsilon_per_metre": 0.01},
    }[key]


@pytest.mark.parametrize(
    ("key", "extra", "named"),
    [
        ("pure_dp", {"epsilon": 1.0, "delta": 1e-6}, "delta"),
        ("pure_dp", {"epsilon": 1.0, "graph": FullDomainGraph()}, "graph"),
        ("local_pdp", {"epsilon": 1.0, "delta": 1e-6, "neighbours": "bounded"}, "neighbours"),
        (
            "blowfish",
            {"epsilon": 1.0, "graph": FullDomainGraph(), "epsilon_per_metre": 0.1},
            "epsilon_per_metre",
        ),
        ("geo_ind", {"epsilon": 1.0, "epsilon_per_metre": 0.01}, "epsilon"),
    ],
)
def test_make_policy_refuses_parameters_the_definition_ignores(key, extra, named):
    with pytest.raises(PolicyError, match=rf"^{named} does not apply to .*leave it unset"):
        make_policy(key, **extra)


def test_make_policy_missing_required_parameters():
    with pytest.raises(PolicyError, match=r"delta must be in \(0, 1\).*\(got None\)"):
        make_policy("approx_dp", epsilon=1.0)
    with pytest.raises(PolicyError, match=r"epsilon must be a finite number > 0 \(got None\)"):
        make_policy("pure_dp")
    with pytest.raises(PolicyError, match=r"epsilon_per_metre must be .*\(got None\)"):
        make_policy("geo_ind")


# --- helpers ----------------------------------------------------------------------------------------------


def test_truthful_probability_values():
    assert truthful_probability(math.log(3)) == pytest.approx(0.75, abs=1e-15)
    assert truthful_probability(1.0) == pytest.approx(math.e / (1 + math.e), rel=1e-15)
    assert truthful_probability(0.1) == pytest.approx(0.525, abs=1e-3)
    assert truthful_probability(0.01) == pytest.approx(0.502, abs=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert truthful_probability(1000.0) == 1.0
        assert truthful_probability(1e300) == 1.0
        assert odds_bound(1000.0) == math.inf
    assert odds_bound(math.log(3)) == pytest.approx(3.0, rel=1e-15)


def test_truthful_probability_rejects_zero():
    with pytest.raises(PolicyError, match=r"\(got 0\)"):
        truthful_probability(0)


@pytest.mark.parametrize("eps", [1e-4, 0.01, 1.0, 50.0])
def test_geo_quantile_inverts_cdf_and_matches_gamma(eps):
    qs = np.array([1e-9, 1e-4, 0.01, 0.25, 0.5, 0.9, 0.95, 0.999, 1 - 1e-9])
    radii = geo_radius_quantile(eps, qs)
    assert isinstance(radii, np.ndarray) and radii.shape == qs.shape
    assert np.all(np.diff(radii) > 0)
    for q, r in zip(qs, radii, strict=True):
        assert abs(_cdf(eps, r) - q) <= 1e-12
        assert geo_radius_quantile(eps, float(q)) == r
    np.testing.assert_allclose(radii, stats.gamma(a=2, scale=1 / eps).ppf(qs), rtol=1e-9)
    np.testing.assert_allclose(geo_radius_cdf(eps, radii), qs, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(
        geo_radius_cdf(eps, radii), stats.gamma(a=2, scale=1 / eps).cdf(radii), rtol=1e-10
    )
    assert geo_radius_cdf(eps, 0.0) == 0.0


def test_from_level_and_level_at():
    geo = GeoIndistinguishability.from_level(level=1.0, radius_m=200.0)
    assert geo.epsilon_per_metre == pytest.approx(0.005, rel=1e-15)
    assert geo.epsilon == geo.epsilon_per_metre and geo.delta == 0.0
    assert geo.level_at(200.0) == pytest.approx(1.0, rel=1e-15)
    assert geo.level_at(1000.0) == pytest.approx(5.0, rel=1e-15)
    assert geo.radius_quantile(0.5) == geo_radius_quantile(0.005, 0.5)
    with pytest.raises(PolicyError, match="radius_m must be"):
        geo.level_at(-1)


# --- policy attributes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.label)
def test_to_dict_round_trip_through_json(policy):
    data = json.loads(json.dumps(policy.to_dict()))
    assert data["definition"] == policy.definition
    restored = policy_from_dict(data)
    assert restored == policy
    assert type(restored) is type(policy)


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.label)
def test_every_policy_states_its_guarantee(policy):
    assert policy.definition in DEFINITIONS
    assert policy.epsilon > 0 and 0 <= policy.delta < 1
    assert policy.neighbour_relation in policy.guarantee
    assert f"{policy.epsilon:.3g}" in policy.guarantee
    assert policy.label and policy.plain_language()
    if policy.definition in ("pure_dp", "blowfish", "geo_ind"):
        assert policy.delta == 0.0


def test_policy_from_dict_rejects_unknown_and_missing_keys():
    with pytest.raises(PolicyError, match=r"Unknown policy parameter\(s\) \['sigma'\]"):
        policy_from_dict({"definition": "pure_dp", "epsilon": 1.0, "sigma": 2.0})
    with pytest.raises(PolicyError, match=r"Missing policy parameter"):
        policy_from_dict({"definition": "approx_dp", "epsilon": 1.0})
    with pytest.raises(PolicyError, match=r"graph kind must be one of"):
        graph_from_dict({"kind": "grid"})


def test_local_pdp_is_not_dp_and_says_so():
    local = LocalPDP(1.0, 1e-6)
    assert local.is_dp is False and local.calibrated_on_data is True
    assert "NOT differential privacy" in local.guarantee
    assert "calibrated on this dataset" in local.guarantee
    assert "one of this dataset's own rows removed" in local.guarantee
    assert "not differential privacy" in local.plain_language()
    assert "not DP" in local.label


def test_is_dp_only_for_standard_dp():
    assert PureDP(1.0).is_dp and ApproxDP(1.0, 1e-6).is_dp
    assert Blowfish(1.0, FullDomainGraph()).is_dp
    assert not Blowfish(1.0, PartitionGraph(1.0)).is_dp
    assert not Blowfish(1.0, AttributeGraph()).is_dp
    assert not GeoIndistinguishability(0.01).is_dp
    assert not any(p.calibrated_on_data for p in ALL_POLICIES if not isinstance(p, LocalPDP))


def test_neighbour_relation_text():
    assert "one row added or removed" in PureDP(1.0).guarantee
    assert "one row's value replaced by any other value" in ApproxDP(1.0, 1e-6, "bounded").guarantee
    assert PureDP(1.0, "bounded").neighbours == "bounded"
    blowfish = Blowfish(1.0, DistanceThresholdGraph(3.0, "l1"))
    assert "L1 (Manhattan) distance θ = 3" in blowfish.guarantee


def test_plain_language_numbers():
    assert "73.11%" in PureDP(1.0).plain_language()
    assert "Bob in the data" in PureDP(1.0).plain_language()
    assert "more than 99.99%" in PureDP(1000.0).plain_language()
    assert "δ = 1e-06" in ApproxDP(1.0, 1e-6).plain_language()
    geo = GeoIndistinguishability(0.01)  # r50 = 168 m, r90 = 389 m, r95 = 474 m, mean 200 m
    text = geo.plain_language()
    for radius in ("168 m", "389 m", "474 m", "mean 200 m"):
        assert radius in text
    assert "within 1.68 km" in GeoIndistinguishability(0.001).plain_language()


# --- graphs -----------------------------------------------------------------------------------------------


def test_graph_kinds_labels_descriptions():
    graphs = [FullDomainGraph(), PartitionGraph(10.0), DistanceThresholdGraph(5.0), AttributeGraph(1)]
    assert [g.kind for g in graphs] == ["full_domain", "partition", "distance_threshold", "attribute"]
    assert "bounded differential privacy" in graphs[0].describe()
    assert "which block" in graphs[1].describe() and "width 10" in graphs[1].describe()
    assert "better than θ = 5" in graphs[2].describe()
    assert "1 attribute" in graphs[3].describe()
    assert graphs[2].metric == "l2"
    for graph in graphs:
        assert graph_from_dict(json.loads(json.dumps(graph.to_dict()))) == graph
        assert graph.label


def test_partition_edges_on_small_domain():
    graph = PartitionGraph(3.0)
    values = np.arange(10.0)
    x, y = np.meshgrid(values, values, indexing="ij")
    edges = graph.adjacent(x[..., None], y[..., None], lower=[0.0])
    expected = (x // 3) == (y // 3)
    np.testing.assert_array_equal(edges, expected)
    shifted = graph.adjacent([[1.0, 5.0]], [[2.0, 6.0]], lower=[1.0, 0.0])  # blocks [1,4) and [3,6)|[6,9)
    np.testing.assert_array_equal(shifted, [False])
    with pytest.raises(PolicyError, match="public lower bound"):
        graph.adjacent([1.0], [2.0])


def test_distance_threshold_edges():
    x = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    y = np.array([[1.0, 1.0], [2.0, 0.0], [1.5, 1.5]])
    np.testing.assert_array_equal(DistanceThresholdGraph(2.0, "l1").adjacent(x, y), [True, True, False])
    np.testing.assert_array_equal(DistanceThresholdGraph(2.0, "l2").adjacent(x, y), [True, True, False])
    np.testing.assert_array_equal(DistanceThresholdGraph(1.5, "l2").adjacent(x, y), [True, False, False])


def test_haversine_edges_use_great_circle_metres():
    one_degree_lat = EARTH_RADIUS_M * math.pi / 180  # 111,195 m along a meridian
    north = DistanceThresholdGraph(one_degree_lat + 1, "haversine")
    assert north.adjacent([60.0, 10.0], [61.0, 10.0])
    assert not DistanceThresholdGraph(one_degree_lat - 1, "haversine").adjacent([60.0, 10.0], [61.0, 10.0])
    # One degree of longitude at 60° N is about half a degree of latitude (≈ 55.6 km), not 111 km.
    east = DistanceThresholdGraph(56_000, "haversine")
    assert east.adjacent([60.0, 10.0], [60.0, 11.0])
    assert not DistanceThresholdGraph(55_000, "haversine").adjacent([60.0, 10.0], [60.0, 11.0])
    with pytest.raises(PolicyError, match="latitude, longitude"):
        north.adjacent([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])


def test_attribute_and_full_domain_edges():
    x = np.zeros((4, 3))
    y = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=float)
    np.testing.assert_array_equal(AttributeGraph(1).adjacent(x, y), [True, True, False, False])
    np.testing.assert_array_equal(AttributeGraph(2).adjacent(x, y), [True, True, True, False])
    np.testing.assert_array_equal(FullDomainGraph().adjacent(x, y), [True] * 4)


def test_geo_quantile_near_branch_point():
    """scipy's lambertw(k=-1) returns the wrong branch for tiny q; the series path must stay exact."""
    for q in (1e-300, 1e-20, 1e-9):
        r = geo_radius_quantile(1.0, q)
        assert r == pytest.approx(math.sqrt(2 * q) * (1 + math.sqrt(2 * q) / 3), rel=1e-12)
        assert geo_radius_cdf(1.0, r) == pytest.approx(q, rel=1e-12)
    below, above = geo_radius_quantile(1.0, [1e-3 * (1 - 1e-12), 1e-3])
    assert below < above and above - below < 1e-12 * above


def test_geo_level_comes_back_exactly_as_typed() -> None:
    for level in (0.1, 0.3, 1.0, 2.5, 0.07):
        for radius in (150.0, 300.0, 1000.0, 2000.0, 7.0, 123.4):
            assert GeoIndistinguishability.from_level(level, radius).level == level
