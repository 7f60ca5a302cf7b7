"""Reproductions of the seed papers' experiments (diagnostics with labelled demo seeds, never releases).

``python -m dpcore.experiments.marketing``: Ravi et al. 2021 Section 4 on the Marketing Campaign sample.
"""
