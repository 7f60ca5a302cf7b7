"""One module per location mechanism; importing this package registers them all in ``LOCATIONS``.

Adding a mechanism is adding its module here (this order is the order the pages show).
"""

from importlib import import_module

MODULES = (
    "planar_laplace",
    "prilocation",
    "uniform_grid",
    "adaptive_grid",
    "blowfish_mean",
    "dp_mean",
    "dp_hotspots",
    "blowfish_hotspots",
)
for _name in MODULES:
    import_module(f"{__name__}.{_name}")
