"""The curator figures a location spec declares (``MechanismSpec.diagnostic_figures``): stamped as
diagnostics, offline unless tiles are asked for, grid counts made non-negative with their total kept."""

from __future__ import annotations

import numpy as np
import pytest

from dpcore.location import LOCATIONS, LocationInputs
from dpcore.location.geometry import Region
from dpcore.mechanisms import Sampler

US = Region(24.0, 50.0, -125.0, -66.0)
DECLARING = [key for key, spec in LOCATIONS.items() if spec.diagnostic_figures is not None]


@pytest.fixture(scope="module")
def inputs() -> LocationInputs:
    rng = np.random.default_rng(0)
    return LocationInputs(rng.uniform(30, 45, 400), rng.uniform(-120, -75, 400), None, US)


def _draw(key: str, inputs: LocationInputs, *, tiles: bool = False, nonnegative: bool = False) -> dict:
    spec = LOCATIONS[key]
    return dict(
        spec.diagnostic_figures(
            inputs,
            epsilon=1.0,
            params=spec.validate_params({}),
            random_state=Sampler.diagnostic(0),
            tiles=tiles,
            nonnegative=nonnegative,
        )
    )


def _types(fig) -> set[str]:
    return {t.type for t in fig.data}


def test_each_mechanism_declares_its_own_curator_figures(inputs):
    names = {key: sorted(_draw(key, inputs)) for key in DECLARING}
    assert names == {
        "planar_laplace": ["displacement", "map_laplace"],
        "prilocation": ["map_pri"],
        "uniform_grid": ["heat_ug"],
        "adaptive_grid": ["heat_ag"],
        "dp_hotspots": ["map_hotspots_dp"],
        "blowfish_hotspots": ["map_hotspots_blowfish"],
    }
    (hotspots,) = _draw("dp_hotspots", inputs).values()
    legend = [t.name for t in hotspots.data]
    assert "true hotspots (non-private k-means)" in legend and legend[-1].endswith(" km")
    assert "nearest released one" in hotspots.layout.title.text


@pytest.mark.parametrize("key", DECLARING)
def test_figures_are_diagnostics_drawn_offline_unless_tiles_are_asked(key, inputs):
    offline = _draw(key, inputs)
    assert all(any(a.text.startswith("Diagnostic") for a in f.layout.annotations) for f in offline.values())
    assert not any("scattermap" in _types(f) for f in offline.values())
    tiled = _draw(key, inputs, tiles=True)
    assert set(tiled) == set(offline)
    maps = [name for name, f in offline.items() if "scattergl" in _types(f)]
    assert all("scattermap" in _types(tiled[name]) for name in maps)


@pytest.mark.parametrize("key", DECLARING)
def test_nonnegative_post_processes_the_heatmaps_only_and_keeps_their_total(key, inputs):
    raw, fixed = _draw(key, inputs), _draw(key, inputs, nonnegative=True)
    for name, fig in raw.items():
        if "heatmap" not in _types(fig):
            assert fixed[name].to_json() == fig.to_json()  # nothing else changes
            continue
        before, after = np.asarray(fig.data[0].z, dtype=float), np.asarray(fixed[name].data[0].z, dtype=float)
        assert before.min() < 0 <= after.min()
        assert after.sum() == pytest.approx(before.sum())
