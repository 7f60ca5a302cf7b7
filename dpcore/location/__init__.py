"""Location release: planar Laplace (geo-indistinguishability), PriLocation, private density grids, Blowfish.

Everything works in great-circle metres (``geometry``). The public API, loaded on first use (so that
``dpcore.location.geometry`` stays light): ``LOCATIONS`` (one registered mechanism per key, each with its
``release(LocationInputs, epsilon=..., delta=0.0, params=..., random_state=...)``), ``LocationInputs``, the
geometry (``Region``, ``PlaneMap``, ``haversine_m``), the mechanisms' engines (``PlanarLaplace``,
``PriLocation``, ``DensityGrid``; the grid builders are in ``dpcore.location.grids``) and the diagnostic
sweep.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS: dict[str, str] = {  # name -> the module that defines it
    "LOCATIONS": "dpcore.location.registry",
    "LocationInputs": "dpcore.location.registry",
    "Region": "dpcore.location.geometry",
    "PlaneMap": "dpcore.location.geometry",
    "LocalProjection": "dpcore.location.geometry",
    "haversine_m": "dpcore.location.geometry",
    "destination_point": "dpcore.location.geometry",
    "validate_latlon": "dpcore.location.geometry",
    "PlanarLaplace": "dpcore.location.laplace",
    "PriLocation": "dpcore.location.prilocation",
    "synthetic_visits": "dpcore.location.prilocation",
    "DensityGrid": "dpcore.location.grids",
    "mean_position": "dpcore.location.blowfish",
    "location_hotspots": "dpcore.location.hotspots",
    "location_sweep": "dpcore.location.sweep",
    "split_budget": "dpcore.location.budget",
    "per_member_epsilon": "dpcore.location.budget",
    "scope_sentence": "dpcore.location.contribution",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return __all__
