"""Launch the dashboard with the engine already imported: ``python -m ui.serve [streamlit run options]``.

``streamlit run app.py`` imports nothing until the first browser session runs the script, so the first
page a curator opens after a (re)start waited about 1.5 s for NumPy, pandas, SQLAlchemy, scikit-learn,
Plotly and ``dpcore`` to import. This launcher imports them in the server process first, then starts
Streamlit's own command line on app.py; every session reuses the loaded modules. Only modules that do
not touch Streamlit's runtime are imported here (the ``ui`` helpers create their caches when the first
run imports them). ``scripts/run-app`` and the browser tests start the app this way.
"""

from __future__ import annotations

import importlib
import os
import sys

# One OpenMP thread per computation, set before scikit-learn loads the runtime (see app.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Every module the pages import that is slow to load (app.py also imports them in a background thread
# after the first run, for a plain ``streamlit run app.py``).
ENGINE_MODULES = (
    "numpy",
    "pandas",
    "sqlalchemy",
    "dpcore.data",
    "dpcore.ledger",
    "dpcore.plan",
    "dpcore.sessions",
    "sklearn.cluster",
    "plotly.graph_objects",
    "dpcore.kmeans",
    "dpcore.plots",
    "dpcore.plots.story",
    "dpcore.location",
    "streamlit.emojis",  # Streamlit's emoji table, read by the first st.info / st.warning (0.4 s)
)


def main(argv: list[str]) -> int:
    """Import :data:`ENGINE_MODULES`, then run ``streamlit run app.py`` with ``argv`` as its options."""
    for name in ENGINE_MODULES:
        importlib.import_module(name)
    from streamlit.web.cli import main as streamlit_main

    return streamlit_main(["run", "app.py", *argv], prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
