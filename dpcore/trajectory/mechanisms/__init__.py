"""One module per releasable trajectory mechanism (the per-fix planar Laplace baseline is comparison only:
it does not hide how many trips and fixes a person has)."""

from dpcore.trajectory.mechanisms import dpt, markov_grid  # noqa: F401
