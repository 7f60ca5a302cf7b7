"""Present: the privacy/accuracy trade-off in three charts a stakeholder reads alone, and as one file.

A shipped sample's story shows at once (no click); the current dataset's own story only in demo mode
(labelled); a real dataset in release mode gets what ε means and its released outputs, never charts
computed from its rows (``ui.present_view``).
"""

import streamlit as st

from dpcore.story import STORY_EPS
from ui import present_view as view
from ui import state
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.text import md

ensure_entrypoint()

st.title("Present: privacy against accuracy")
dataset = state.dataset()
options = view.choices(dataset)
label = st.selectbox(
    "Story of",
    options,
    key=state.persist("present_story", view.default_choice(dataset), options.__contains__),
)
epsilon = float(
    st.select_slider(
        "ε to explain",
        options=STORY_EPS,
        key=state.persist("present_eps", 1.0, STORY_EPS.__contains__),
        help="ε is the privacy loss: smaller means more privacy and more noise.",
    )
)
told = None
with user_errors("telling the story"):
    spent = view.spent_epsilon(view.story_dataset_id(label, dataset))
    key = view.sample(label)
    if key is not None:
        told = view.tell(view.shipped(key), epsilon, spent)
    elif dataset is not None and state.mode() == "demo":
        prepared = dataset.prepared
        if prepared is None:
            st.info("Prepare this dataset's features on the Data page first (demo mode tells its story).")
            st.page_link("pages/data.py", label="Go to the Data page", icon=":material/table:")
        else:
            told = view.tell(view.demo_story(dataset, prepared), epsilon, spent)
    elif dataset is not None:
        st.info(view.REFUSED.format(name=md(dataset.name)), icon=":material/lock:")
        told = view.released_story(dataset, epsilon, spent)
        released = view.released_table(dataset)
        if not released.empty:
            st.dataframe(released, hide_index=True)
if told is not None:
    st.subheader(md(told.title))
    if told.banner:
        st.warning(md(told.banner), icon=":material/science:")
    for sentence in told.sentences:
        st.markdown(f"- {md(sentence)}")
    for i, fig in enumerate(told.figures):
        st.plotly_chart(fig, key=f"present_chart_{i}")
    for note in told.notes:
        st.caption(md(note))
    file_name, content = view.download(told)
    st.download_button(
        "Download this story",
        data=content,
        file_name=file_name,
        mime="text/html",
        icon=":material/download:",
        on_click="ignore",
        key="present_download",
        help="One HTML file with these charts; it opens offline.",
    )
