"""The k-means mechanism registry: one module per mechanism, validated parameters, releases that hold only
released values, no library warnings, and a K-means page in plain words (formulas only on request)."""

from __future__ import annotations

import importlib
import json
import math
import re
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1 import element_tree as et

from dpcore.data import fingerprint, infer_schema, load_sample, prepare
from dpcore.errors import ParameterError
from dpcore.kmeans import KMEANS, KMeansInputs, centroid_table, release_centroids, released_centers, sweep
from dpcore.kmeans.registry import takes
from dpcore.mechanisms import Sampler
from dpcore.policy import Blowfish, FullDomainGraph, PartitionGraph
from tests.paths import ROOT
from ui.state import Dataset

DEFINITIONS = {
    "white": "local_pdp",
    "white_per_cluster": "local_pdp",
    "colored": "local_pdp",
    "dp_lloyd": "pure_dp",
    "blowfish_lloyd": "blowfish",
    "dp_lloyd_mcmc": "pure_dp",
    "gaussian_lloyd": "approx_dp",
    "lsh_coreset": "approx_dp",
}
FORBIDDEN = ("seed 0", "MECHANISMS", "Sigma =", "Σ =", "Σ_k =", "||u_p||")
APP = str(ROOT / "app.py")


@pytest.fixture(scope="module")
def inputs() -> KMeansInputs:
    """Three clusters in [-4, 4]^2 with their labels, public bounds and an inverse transform (x 10)."""
    rng = np.random.default_rng(1)
    X = np.clip(np.vstack([rng.normal(c, 0.4, (150, 2)) for c in ((-2, -2), (2, 0), (0, 2.5))]), -4, 4)
    labels = np.repeat([0, 1, 2], 150)
    return KMeansInputs(
        X,
        labels,
        np.full(2, -4.0),
        np.full(2, 4.0),
        ("a", "b"),
        lambda c: pd.DataFrame(c * 10, columns=["a", "b"]),
    )


def _params(key: str, **extra: object) -> dict:
    params: dict = {"n_clusters": 3, **extra}
    if key in ("blowfish", "blowfish_lloyd"):
        params["graph"] = PartitionGraph(1.0).to_dict()
    if key == "dp_lloyd_mcmc":
        params.setdefault("mcmc_steps", 300)
    return params


def _release(key: str, inputs: KMeansInputs, random_state: Sampler, epsilon: float = 1.0) -> object:
    delta = 1e-6 if KMEANS[key].needs_delta else 0.0
    return release_centroids(
        key, inputs, epsilon=epsilon, delta=delta, random_state=random_state, params=_params(key)
    )


# ---------------------------------------------------------------- the registry


def test_every_mechanism_is_one_module_with_a_definition_and_a_plain_summary() -> None:
    assert list(KMEANS) == list(DEFINITIONS)  # the order the pages offer them
    for key, spec in KMEANS.items():
        module = importlib.import_module(f"dpcore.kmeans.mechanisms.{key}")
        assert module.SPEC is spec and spec.key == key and spec.domain == "kmeans"
        assert spec.definition == DEFINITIONS[key] and spec.is_dp == (DEFINITIONS[key] != "local_pdp")
        assert spec.needs_delta == (DEFINITIONS[key] in ("local_pdp", "approx_dp"))  # Gaussian noise
        assert callable(spec.release) and callable(spec.trial)
        for text in (spec.summary, spec.formula, spec.citation):
            assert text and not any(word in text for word in ("seed", "MECHANISMS", ".md"))
        assert not any(sign in spec.summary for sign in ("=", "Σ", "‖", "||", "γ", "_"))  # no formulas
        assert re.search(r"[A-Z][a-z]+.* (19|20)\d\d", spec.citation)  # author and year
        if "PDP" in spec.summary:
            assert "probabilistic differential privacy, PDP" in spec.summary
        if re.search(r"\bDP\b", spec.summary.replace("DP-Lloyd", "")):
            assert "differential privacy" in spec.summary
        if "MCMC" in spec.summary:
            assert "Markov chain Monte Carlo" in spec.summary
        defaults = spec.validate_params({"graph": {"kind": "full_domain"}} if takes(spec, "graph") else {})
        assert defaults["n_clusters"] == 4
    assert KMEANS["colored"].validate_params({})["calibration"] == "analytic"
    for key in ("dp_lloyd", "dp_lloyd_mcmc"):  # the release plan reads the neighbour relation from here
        (param,) = [p for p in KMEANS[key].params if p.name == "neighbours"]
        assert param.choices == ("unbounded", "bounded") and param.default == "unbounded"
    assert [k for k, s in KMEANS.items() if takes(s, "graph")] == ["blowfish_lloyd"]


def test_parameters_are_validated_once_with_messages_naming_the_fix() -> None:
    white, lloyd, blowfish = KMEANS["white"], KMEANS["dp_lloyd"], KMEANS["blowfish"]
    assert lloyd.validate_params({"n_clusters": 3.0, "n_iter": 5}) == {
        "n_clusters": 3,
        "n_iter": 5,
        "neighbours": "unbounded",
    }
    cases = [
        (white, {"n_clusters": 0}, "Number of clusters K must lie in"),
        (white, {"n_clusters": "two"}, "Number of clusters K must be a int"),
        (white, {"calibration": "exact"}, "Gaussian calibration must be one of analytic, paper, classic"),
        (white, {"neighbours": "bounded"}, "White Gaussian has no parameter neighbours"),
        (lloyd, {"neighbours": "replace"}, "Neighbour relation must be one of unbounded, bounded"),
        (lloyd, {"n_iter": -1}, "Lloyd rounds must lie in"),
        (blowfish, {}, "Blowfish policy graph must be a dict"),
        (blowfish, {"graph": FullDomainGraph()}, "Privacy policy page"),
        (KMEANS["dp_lloyd_mcmc"], {"mcmc_steps": 0}, "MCMC chain length must lie in"),
    ]
    for spec, values, message in cases:
        with pytest.raises(ParameterError, match=re.escape(message)):
            spec.validate_params(values)
    with pytest.raises(ParameterError, match="Unknown kmeans mechanism 'laplace'"):
        KMEANS["laplace"]


def test_inputs_are_validated() -> None:
    X = np.zeros((4, 2))
    with pytest.raises(ParameterError, match="finite numbers"):
        KMeansInputs(np.array([[0.0, np.nan]]))
    with pytest.raises(ParameterError, match="one integer cluster index"):
        KMeansInputs(X, np.array([0, 1]))
    with pytest.raises(ParameterError, match="both public bounds"):
        KMeansInputs(X, None, np.zeros(2))
    with pytest.raises(ParameterError, match="lower < upper"):
        KMeansInputs(X, None, np.ones(2), np.zeros(2))
    with pytest.raises(ParameterError, match="feature_names"):
        KMeansInputs(X, feature_names=("a",))
    assert KMeansInputs(X).feature_names == ("x0", "x1") and KMeansInputs(X).bounds is None


# ---------------------------------------------------------------- releases


@pytest.mark.parametrize("key", list(DEFINITIONS))
def test_each_release_holds_only_released_centroids(key: str, inputs: KMeansInputs) -> None:
    out = _release(key, inputs, Sampler(seed=3))
    true_centers = inputs.true_centers()
    table = out.table
    assert list(table.columns) == ["cluster", "a [original units]", "b [original units]"]  # public bounds
    assert table["cluster"].tolist() == [0, 1, 2]
    centers = released_centers(out)
    assert centers.shape == (3, 2) and np.isfinite(centers).all()
    np.testing.assert_allclose(table[["a [original units]", "b [original units]"]].to_numpy(), centers * 10)
    # no released value is a true one: every column differs from every true-centre coordinate vector
    for column in table.columns[1:]:
        values = table[column].to_numpy(dtype=float)
        for true in (*true_centers.T, *(true_centers.T * 10)):
            assert not np.allclose(np.sort(values), np.sort(true), rtol=0, atol=1e-9), column
    (figure,) = out.figures  # the chart that leaves with the release plots the released values only
    np.testing.assert_allclose([trace.y for trace in figure.data if trace.type == "bar"], (centers + 4) / 8)
    assert figure.layout.title.text.startswith(f"Released centroids ({KMEANS[key].label})")
    json.dumps(out.details)  # manifest details are plain JSON ...
    assert not set(out.details) & {"true_centers", "noise_trace", "optimality_gap", "covariance"}
    assert set(out.details["columns"]) == {"a [original units]", "b [original units]"}
    if not KMEANS[key].is_dp:  # ... and the data-dependent values stay in the diagnostics
        np.testing.assert_allclose(out.diagnostics["true_centers"], true_centers)
        assert out.details["calibration"] == "analytic"
    elif DEFINITIONS[key] == "approx_dp":  # composed exactly; the accountant stays within the budget
        assert out.details["budget_spent"] == 1.0 and out.details["delta_spent"] == 1e-6
        assert out.details["gaussian_accounting"]["epsilon_accounted"] <= 1.0
        assert np.all((centers >= -4) & (centers <= 4))
    else:
        assert math.fsum(e for _, e in out.details["budget_log"]) == 1.0
        assert out.details["budget_spent"] == 1.0
        assert np.all((centers >= -4) & (centers <= 4))
    again = _release(key, inputs, Sampler(seed=3))
    pd.testing.assert_frame_equal(table, again.table)  # a demo seed reproduces
    assert not _release(key, inputs, Sampler()).table.equals(table)  # secure sampling does not


def test_releases_refuse_what_they_cannot_honour(inputs: KMeansInputs) -> None:
    bare = replace(inputs, labels=None)
    no_bounds = KMeansInputs(inputs.X, inputs.labels)
    cases = [
        ("colored", inputs, {"random_state": Sampler.diagnostic(0), "delta": 1e-6}, "secure sampling"),
        ("dp_lloyd", inputs, {"random_state": Sampler.diagnostic(0)}, "secure sampling"),
        ("white", inputs, {"delta": 0.0}, "give δ > 0"),
        ("dp_lloyd", inputs, {"delta": 1e-6}, "spends no δ"),
        ("colored", bare, {"delta": 1e-6}, "pass its labels"),
        ("dp_lloyd", no_bounds, {}, "needs public bounds"),
        ("blowfish", no_bounds, {}, "needs public bounds"),
    ]
    for key, data, kw, message in cases:
        kw = {"epsilon": 1.0, "random_state": Sampler(seed=1), **kw}
        with pytest.raises(ParameterError, match=re.escape(message)):
            release_centroids(key, data, params=_params(key), **kw)
    with pytest.raises(ParameterError, match="has 3 clusters but K = 4"):
        release_centroids("white", inputs, epsilon=1.0, delta=1e-6, params={"n_clusters": 4})
    with pytest.raises(ParameterError, match="Blowfish policy graph"):
        release_centroids("blowfish", inputs, epsilon=1.0, params={"graph": {"kind": "ring"}})


def test_dp_lloyd_release_is_calibrated_for_the_neighbour_parameter(inputs: KMeansInputs) -> None:
    runs = {
        nb: release_centroids(
            "dp_lloyd",
            inputs,
            epsilon=1.0,
            random_state=Sampler(seed=2),
            params=_params("dp_lloyd", neighbours=nb),
        )
        for nb in ("unbounded", "bounded")
    }
    assert runs["unbounded"].details["budget_log"][0][0].startswith("row count")  # n is private
    assert not any(q.startswith("row count") for q, _ in runs["bounded"].details["budget_log"])
    assert {nb: r.details["neighbours"] for nb, r in runs.items()} == {
        "unbounded": "unbounded",
        "bounded": "bounded",
    }
    blow = release_centroids(
        "blowfish", inputs, epsilon=1.0, random_state=Sampler(seed=2), params=_params("blowfish")
    )
    assert blow.details["graph"] == PartitionGraph(1.0).label
    assert all(g >= 1.0 - 1e-12 for g in blow.details["sensitivity_gain"])


def test_centroid_table_from_prepared_data_publishes_only_public_coordinates() -> None:
    raw = pd.DataFrame({"x": [0.0, 1.0, 2.0, 9.0, 10.0], "y": [5.0, 6.0, 5.5, 1.0, 2.0]})
    bounds = {"x": (0, 10), "y": (0, 10)}
    centers = np.array([[0.1, -0.2], [0.5, 0.3]])
    minmax = prepare(raw, infer_schema(raw), ["x", "y"], scaling="minmax", bounds=bounds)
    table = centroid_table(KMeansInputs.from_prepared(minmax), centers)
    assert list(table.columns) == ["cluster", "x [original units]", "y [original units]"]
    np.testing.assert_allclose(table["x [original units]"], (centers[:, 0] + 1) * 5)
    std = prepare(raw, infer_schema(raw), ["x", "y"], scaling="standardize", bounds=bounds)
    table = centroid_table(KMeansInputs.from_prepared(std), centers)  # public bounds: original units
    np.testing.assert_allclose(table["y [original units]"], centers[:, 1] * std.scale[1] + std.center[1])
    assert list(table.columns) == ["cluster", "x [original units]", "y [original units]"]
    data = prepare(
        raw, infer_schema(raw), ["x", "y"], scaling="standardize", bounds={"y": (0, 10)}, data_bounds_ok=True
    )
    table = centroid_table(KMeansInputs.from_prepared(data), centers)  # x's bounds are the data's 0 and 10
    assert list(table.columns) == ["cluster", "x [fraction of data range]", "y [original units]"]
    x = centers[:, 0] * data.scale[0] + data.center[0]  # in original units
    np.testing.assert_allclose(table["x [fraction of data range]"], (x - 0) / (10 - 0))


# ---------------------------------------------------------------- no library warnings


def test_mcmc_turns_scikit_learn_warnings_into_a_plain_note(inputs: KMeansInputs) -> None:
    """One-step chains settle on fewer distinct synthetic points than K: scikit-learn warns, we do not."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sweep(
            inputs.X,
            inputs.labels,
            ["dp_lloyd_mcmc"],
            [0.05, 0.2],
            3,
            bounds=inputs.bounds,
            random_state=0,
            mcmc_steps=1,
        )
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    (note,) = [str(w.message) for w in caught]
    assert re.match(r"DP-Lloyd \+ MCMC: in [1-6] of 6 diagnostic runs, the synthetic data", note)
    assert "fewer distinct points than K" in note


def test_mcmc_release_reports_a_degenerate_chain_as_a_caveat(inputs: KMeansInputs, monkeypatch) -> None:
    from dpcore.kmeans.mcmc import LeeKiferKMeans

    original = LeeKiferKMeans.fit

    def fit(self, X, y=None):  # the library warning the chain's k-means raises, and an unrelated one
        original(self, X, y)
        message = "Number of distinct clusters (2) found smaller than n_clusters (3)."
        warnings.warn(message, ConvergenceWarning, stacklevel=2)
        warnings.warn("an unrelated warning", RuntimeWarning, stacklevel=2)
        return self

    monkeypatch.setattr(LeeKiferKMeans, "fit", fit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _release("dp_lloyd_mcmc", inputs, Sampler(seed=4))
    assert [w.category for w in caught] == [RuntimeWarning]  # passed through, not swallowed
    (caveat,) = out.details["caveats"]
    assert caveat.startswith("The synthetic data the MCMC search settled on had fewer distinct points than K")


# ---------------------------------------------------------------- the K-means page in plain words


def _texts(node: object, inside: bool = False):
    """(text, inside an expander) for every string the page shows: values, labels, help and options."""
    for child in getattr(node, "children", {}).values():
        if isinstance(child, et.Expander):
            yield child.label, inside
            yield from _texts(child, True)
        elif isinstance(child, et.Block):
            yield from _texts(child, inside)
        else:
            for name in ("value", "label", "help"):
                try:
                    text = getattr(child, name, None)
                except (AttributeError, KeyError, ValueError):  # widgets without that field
                    continue
                if isinstance(text, str):
                    yield text, inside
            options = getattr(child, "options", None)
            if isinstance(options, list):
                yield from ((o, inside) for o in options if isinstance(o, str))


def _page(policy: object = None) -> AppTest:
    raw = load_sample("marketing_campaign")
    bounds = {"Income": (0, 200000), "MntWines": (0, 1500), "MntMeatProducts": (0, 1800)}
    schema = infer_schema(raw)
    ds = Dataset(name="Marketing", raw=raw, schema=schema, cleaned=raw, fingerprint=fingerprint(raw))
    ds = replace(
        ds, prepared=prepare(raw, schema, list(bounds), scaling="minmax", bounds=bounds, missing="drop")
    )
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["dp_dataset"] = ds
    if policy is not None:
        at.session_state["dp_policy"] = policy
    at.run()
    at.switch_page("pages/kmeans.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_kmeans_page_speaks_plainly_and_keeps_formulas_in_expanders() -> None:
    at = _page()
    texts = list(_texts(at.main))
    outside = [t for t, inside in texts if not inside]
    inside = [t for t, inside in texts if inside]
    assert not [t for t in outside if any(word in t for word in FORBIDDEN)], outside
    assert not [t for t in outside + inside if "seed 0" in t or "MECHANISMS" in t]
    for spec in KMEANS.values():  # one plain sentence each, the formula and sources on request
        assert spec.summary in outside
        assert spec.formula.replace("*", "\\*").replace("_", "\\_") in inside
        assert f"Source: {spec.citation}." in inside
    assert sum(t == "Formula and source" for t in outside) >= len(KMEANS)
    assert any("probabilistic differential privacy, PDP" in t for t in outside)
    (gain,) = [t for t in outside if t.startswith("Noise of Blowfish with the")]
    assert "Full domain (bounded DP) graph" in gain and "no gain over bounded DP here" in gain
    assert not re.search(r"\d×", gain)
    assert "Paper (Ravi, Scaglione & Peisert 2021)" in at.selectbox(key="km_calibration").options


def test_blowfish_gain_reads_as_a_sentence() -> None:
    at = _page(Blowfish(1.0, PartitionGraph(0.5)))
    (gain,) = [c.value for c in at.caption if c.value.startswith("Noise of Blowfish with the")]
    assert "noise on the cluster sums can be up to 4 times smaller with this graph" in gain  # 2 / 0.5
    run = re.search(
        r"at ε = 1, it (?:added ([\d.]+) to ([\d.]+) times less noise, depending on the round|added "
        r"([\d.]+) times less noise in every round|gave no gain over bounded DP here)\.$",
        gain,
    )
    assert run, gain
    values = [float(v) for v in run.groups() if v]
    assert all(1.0 <= v <= 4.0 for v in values) and values == sorted(values)
