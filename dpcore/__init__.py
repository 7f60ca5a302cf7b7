"""dpcore: differentially private release of k-means centroids and locations.

The engine behind the dashboard; it never imports Streamlit and works the same from a notebook.
"""

__version__ = "0.1.0"
