"""Plotly figure builders for the dashboard and the HTML reports.

Pure functions returning ``plotly.graph_objects.Figure``: no Streamlit, no data access beyond their
arguments. Charts that read the true data carry a "Diagnostic: uses raw data" annotation by default.
"""

from dpcore.plots.kmeans import (
    DIAGNOSTIC_TEXT,
    diagnostic_annotation,
    elbow,
    ellipse_points,
    embedding,
    loss_vs_eps,
    mechanism_color,
    population_table_figure,
    project_covariance,
    released_centers_figure,
    violins,
)

__all__ = [
    "DIAGNOSTIC_TEXT",
    "diagnostic_annotation",
    "elbow",
    "ellipse_points",
    "embedding",
    "loss_vs_eps",
    "mechanism_color",
    "population_table_figure",
    "project_covariance",
    "released_centers_figure",
    "violins",
]
