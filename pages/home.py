"""Home: what the tool does, the workflow, and the two kinds of output."""

import streamlit as st

from ui.nav import ensure_entrypoint, registered_pages
from ui.present_view import home_meaning_chart

ensure_entrypoint()

st.title("Differentially private centroids and locations")
st.markdown(
    "Turn a sensitive table into a **differentially private release** of k-means cluster centres or of "
    "locations. See what each mechanism costs in accuracy before spending any privacy budget, release one "
    "result with a manifest, and keep every release in a budget ledger."
)

st.header("Workflow")
st.markdown(
    "1. **Data**: pick a sample or upload a CSV / Parquet / Excel file; check the inferred column kinds, "
    "handle missing values, choose features, enter public bounds and a scaling.\n"
    "2. **Privacy policy**: choose the definition (ε-DP, (ε, δ)-DP, Blowfish, geo-indistinguishability, "
    "or the colored-noise paper's local guarantee), ε and δ, and the dataset's total budget.\n"
    "3. **K-means** / **Locations**: compare mechanisms over many noisy trials, then release one.\n"
    "4. **Ledger**: every release with its time, user, dataset fingerprint, mechanism, ε, δ, sampling mode "
    "and download; the budget left per dataset."
)

st.header("Two kinds of output, never confused")
left, right = st.columns(2)
with left:
    st.subheader("Diagnostics")
    st.markdown(
        "Comparisons over many noisy trials, true centroids, true maps, elbow charts. They use the raw data, "
        "cost no budget and are **for the curator only**: they contain non-private information."
    )
with right:
    st.subheader("Releases")
    st.markdown(
        "One mechanism, one run, budget debited once and recorded in the ledger. Downloadable as CSV / JSON "
        "with a manifest (definition, ε, δ, mechanism, calibration, bounds source, dataset fingerprint, "
        "time, sampling mode) and as a self-contained HTML report. These are the only outputs meant to leave."
    )

st.header("What ε means")
st.markdown(
    "ε (epsilon) is the privacy loss a release is allowed: the smaller, the more privacy and the more noise. "
    "The **Present** page tells the trade-off on a sample in three charts and downloads it as one file."
)
st.plotly_chart(home_meaning_chart(), key="home_meaning")

st.header("Pages")
for path, title, icon in registered_pages():
    if path != "pages/home.py":
        st.page_link(path, label=title, icon=icon)
