"""One module per k-means mechanism; importing this package registers them all in ``KMEANS``.

Adding a mechanism is adding a module here that registers its ``MechanismSpec`` and importing it below,
in the order the pages offer the mechanisms (hence no import sorting in this block).
"""

# isort: off
from dpcore.kmeans.mechanisms import white, white_per_cluster, colored  # noqa: F401  (registers)
from dpcore.kmeans.mechanisms import dp_lloyd, blowfish_lloyd, dp_lloyd_mcmc  # noqa: F401  (registers)
from dpcore.kmeans.mechanisms import gaussian_lloyd, lsh_coreset  # noqa: F401  (registers)

# isort: on
from dpcore.kmeans.mechanisms._gaussian import local_unavailable
from dpcore.kmeans.mechanisms.blowfish_lloyd import blowfish_gain

__all__ = ["blowfish_gain", "local_unavailable"]
