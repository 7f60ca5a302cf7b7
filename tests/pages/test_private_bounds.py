"""A curator without public bounds (AppTest): the Data page's "estimate the bounds privately" with ε_b,
then a DP-Lloyd release from the K-means page whose "What will run" shows ε_b, whose manifest records the
estimated bounds, and whose spend is two rows of one ledger transaction adding up to the budget exactly."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pandas as pd

from dpcore import config
from dpcore.ledger import Ledger
from dpcore.private_bounds import LABEL, MECHANISM
from tests.pages.test_dataset_name import _ok, _open, _release, _save_budget, _upload
from tests.prep_table import edit_table
from ui.state import MODE_KEY


def test_a_dp_lloyd_release_with_private_bounds_spends_its_two_parts_in_one_transaction() -> None:
    rng = np.random.default_rng(5)
    table = pd.DataFrame({"x": rng.normal(40, 8, 300).round(2), "y": rng.normal(5, 1, 300).round(3)})
    at = _open()
    _upload(at, "private.csv", table.to_csv(index=False).encode())
    edit_table(at, features=["x", "y"], bounds={"y": ("0", "10")})
    at.session_state[MODE_KEY] = "demo"  # demo mode refuses private bounds at the checkbox, saying why
    at.run()
    assert at.checkbox(key="data_private_bounds").disabled
    assert any(c.value.startswith("Estimating bounds privately: Not available in demo") for c in at.caption)
    at.session_state[MODE_KEY] = "secure"
    at.run()
    at.checkbox(key="data_private_bounds").check().run()
    at.number_input(key="data_private_eps").set_value(0.25).run()
    assert any("off by up to 129 rows (95%)" in c.value for c in at.caption)  # what ε_b buys, before spending
    at.radio(key="data_scaling").set_value("minmax").run()
    at.button(key="data_prepare").click().run()
    prepared = _ok(at).session_state["dp_dataset"].prepared
    assert prepared.private_bounds == {"features": ["x"], "epsilon": 0.25, "scaling": "minmax"}
    assert any("estimated privately when a release runs" in i.value for i in at.info)
    _save_budget(at, 1.0, 0.0)
    shown = _release(at, 0.75)
    assert shown["ε_b (private bounds)"] == "0.25" and shown["ε in all"] == "1"
    assert any("estimated privately at release" in v for k, v in shown.items() if k == "Preparation")

    ledger = Ledger(config.ledger_url())
    try:
        records = ledger.releases(dataset_id=at.session_state["dp_dataset"].dataset_id)
        spent = sorted((r.mechanism, r.epsilon, r.time) for r in records)
        assert [(m, e) for m, e, _ in spent] == [("dp_lloyd", 0.75), (MECHANISM, 0.25)]
        assert spent[0][2] == spent[1][2]  # one transaction, one time
        budget = ledger.budgets(records[0].dataset_id)[0]
        assert budget.epsilon_left == 0.0  # 0.75 + 0.25 = 1 exactly
        release = next(r for r in records if r.mechanism == "dp_lloyd")
        with zipfile.ZipFile(release.artifact_path) as archive:
            name = next(n for n in archive.namelist() if n.endswith("-manifest.json"))
            manifest = json.loads(archive.read(name))
    finally:
        ledger.close()
    lo, hi = manifest["estimated_bounds"]["x"]
    assert lo < hi and manifest["private_bounds"]["epsilon"] == 0.25
    at.switch_page("pages/ledger.py").run()  # the bound step reads as part of its release, not a release
    (rows,) = [d.value for d in _ok(at).dataframe if "request id" in d.value.columns]
    assert rows["mechanism"].tolist() == ["DP-Lloyd (SuLQ)", f"↳ {LABEL} for {release.request_id}"]
    (accounts,) = [d.value for d in at.dataframe if "ε left" in d.value.columns]
    assert accounts["releases"].tolist() == [1] and accounts["ε left"].tolist() == [0.0]
    again = _open(at.query_params["s"])  # a reload restores the choice of private bounds with its ε_b
    assert again.session_state["dp_dataset"].prepared.private_bounds == prepared.private_bounds
