"""Settings belong to the dataset they were chosen for: loading another table never carries them over, and
loading a table again in the session gives back its own steps and settings."""

from __future__ import annotations

import pandas as pd
from streamlit.testing.v1 import AppTest

from dpcore.data import fingerprint, infer_schema
from ui.state import Dataset

TIMEOUT = 60
WINE = b"alcohol,ash\n13.2,2.4\n,2.1\n12.4,\n14.1,2.7\n13.0,2.2\n"
CANCER = b"radius,texture\n17.9,10.4\n,17.8\n19.7,21.3\n11.4,\n20.3,14.3\n"


def _upload(at: AppTest, name: str, content: bytes) -> None:
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value((name, content, "text/csv")).run()
    assert not at.exception and at.session_state["dp_dataset"].name == name


def _treat(at: AppTest, strategy: str) -> None:
    at.selectbox(key="data_missing_strategy").set_value(strategy).run()
    at.button(key="data_apply_missing").click().run()
    assert not at.exception


def test_loading_a_table_again_restores_its_own_steps_never_anothers(app_path: str) -> None:
    at = AppTest.from_file(app_path, default_timeout=TIMEOUT).run()
    at.switch_page("pages/data.py").run()
    _upload(at, "wine.csv", WINE)
    _treat(at, "drop")
    assert at.session_state["dp_dataset"].steps == (("drop", ("alcohol", "ash")),)
    _upload(at, "cancer.csv", CANCER)
    assert at.session_state["dp_dataset"].steps == ()
    assert at.selectbox(key="data_missing_strategy").value == "drop"  # the default, nothing carried over
    _treat(at, "median")
    assert at.session_state["dp_dataset"].steps == (("median", ("radius", "texture")),)

    _upload(at, "wine.csv", WINE)  # wine again: its own drop, not cancer's median
    wine = at.session_state["dp_dataset"]
    assert wine.steps == (("drop", ("alcohol", "ash")),) and len(wine.cleaned) == 3
    notes = [i.value for i in at.info if "used earlier in this session" in i.value]
    assert len(notes) == 1 and "drop on alcohol, ash" in notes[0]
    assert "Applied: drop on alcohol, ash (2 rows removed)" in [c.value for c in at.caption]

    _upload(at, "cancer.csv", CANCER)  # and cancer gets its median back, with its own treatment shown
    assert at.session_state["dp_dataset"].steps == (("median", ("radius", "texture")),)


def _k_script() -> None:
    import streamlit as st

    from ui import state

    st.number_input("K", min_value=1, step=1, key=state.persist("km_k", 4))
    st.radio("mode", ["secure", "demo"], key=state.persist(state.MODE_KEY, "secure"))


def _dataset(name: str, values: list[float]) -> Dataset:
    raw = pd.DataFrame({"x": values})
    return Dataset(name=name, raw=raw, schema=infer_schema(raw), cleaned=raw, fingerprint=fingerprint(raw))


def test_a_page_setting_chosen_for_one_dataset_is_not_applied_to_another() -> None:
    wine, cancer = _dataset("wine.csv", [1.0, 2.0]), _dataset("breast_cancer.csv", [3.0, 4.0])
    at = AppTest.from_function(_k_script, default_timeout=TIMEOUT)
    at.session_state["dp_dataset"] = wine
    at.run()
    at.number_input(key="km_k").set_value(3).run()
    at.radio(key="dp_mode").set_value("demo").run()  # a session setting, not the dataset's
    at.session_state["dp_dataset"] = cancer
    at.run()
    assert at.number_input(key="km_k").value == 4  # the default: K = 3 was chosen for wine
    assert at.radio(key="dp_mode").value == "demo"
    at.number_input(key="km_k").set_value(7).run()
    at.session_state["dp_dataset"] = wine
    at.run()
    assert at.number_input(key="km_k").value == 3  # wine's own K
    at.session_state["dp_dataset"] = cancer
    at.run()
    assert at.number_input(key="km_k").value == 7
