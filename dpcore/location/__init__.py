"""Location release: planar Laplace (geo-indistinguishability), PriLocation, private density grids, Blowfish.

Everything works in great-circle metres (``geometry``). The public API, loaded on first use (so that
``dpcore.location.geometry`` stays light): ``LOCATIONS`` (one registered mechanism per key, each with its
``release(LocationInputs, epsilon=..., delta=0.0, params=..., random_state=...)``), ``LocationInputs``, the
geometry (``Region``, ``PlaneMap``, ``haversine_m``), the mechanisms' engines and the diagnostic sweep.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS: dict[str, str] = {
    "LOCATIONS": "registry",
    "LocationInputs": "registry",
    "Region": "geometry",
    "PlaneMap": "geometry",
    "LocalProjection": "geometry",
    "haversine_m": "geometry",
    "destination_point": "geometry",
    "validate_latlon": "geometry",
    "PlanarLaplace": "laplace",
    "planar_laplace": "laplace",
    "PriLocation": "prilocation",
    "synthetic_visits": "prilocation",
    "DensityGrid": "grids",
    "uniform_grid": "grids",
    "adaptive_grid": "grids",
    "mean_position": "blowfish",
    "location_hotspots": "hotspots",
    "location_sweep": "sweep",
    "split_budget": "budget",
    "per_member_epsilon": "budget",
    "scope_sentence": "contribution",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return __all__
