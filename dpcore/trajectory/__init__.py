"""Trajectory release: DPT synthetic trips (He et al. 2015), protected per person, and its baselines.

``roads`` generates test and demo trips on a synthetic road network; ``prepare`` turns a table of fixes
into trips under public limits (at most m trips of at most L fixes per person); ``dpt`` is the mechanism
(``levels=1, order=1`` its uniform-grid baseline); ``perpoint`` the per-fix planar Laplace baseline;
``metrics`` He et al.'s utility measures; ``sweep`` the comparison over eps and trials.
"""
