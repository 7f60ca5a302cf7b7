"""A curator without a public region (AppTest): the Locations page's "estimate it privately" with ε_b, a
density-grid release whose "What will run" shows ε_b and the total, whose manifest records the estimated
region, and whose spend is two rows of one ledger transaction adding up to the budget exactly; in demo
mode the choice is refused at the checkbox, not at release."""

from __future__ import annotations

import json

from dpcore import config
from dpcore.artifacts import short_id
from dpcore.ledger import Ledger
from dpcore.location.geometry import Region
from dpcore.location.private_region import LABEL, MECHANISM
from dpcore.plan import policy_account
from tests.pages.test_locations import _airports, _errors
from tests.panel import release_button
from ui.state import DEFAULT_POLICY, MODE_KEY


def test_a_release_with_a_private_region_spends_its_two_parts_in_one_transaction(downloads) -> None:
    at = _airports()
    ds = at.session_state["dp_dataset"]
    ledger, account = Ledger(config.ledger_url()), policy_account(ds.dataset_id, DEFAULT_POLICY)
    ledger.set_budget(account, 1.1, 1e-6)
    at.checkbox(key="loc_private_region").check().run()
    at.number_input(key="loc_private_eps").set_value(0.1).run()
    assert any("estimates its region privately" in i.value for i in at.info)
    at.selectbox(key="loc_rel_mech").set_value("uniform_grid").run()
    at.number_input(key="loc_rel_eps").set_value(1.0).run()
    shown = dict(zip(at.table[-1].value.index, at.table[-1].value["value"], strict=True))
    assert shown["ε_b (private region)"] == "0.1" and shown["ε in all"] == "1.1"
    assert "off by up to" in shown["Private region"]
    assert shown["Preparation"].startswith("no public region: estimated privately at release")  # the last
    assert any("The region was estimated privately first" in i.value for i in at.info)
    release_button(at, "locations").click().run()
    assert not at.exception and not _errors(at)

    records = ledger.releases(account)
    spent = sorted((r.mechanism, r.epsilon, r.time) for r in records)
    assert [(m, e) for m, e, _ in spent] == [(MECHANISM, 0.1), ("uniform_grid", 1.0)]
    assert spent[0][2] == spent[1][2]  # one transaction
    assert ledger.remaining(account)[0] == 0.0  # 1.0 + 0.1 = 1.1 exactly
    release = next(r for r in records if r.mechanism == "uniform_grid")
    manifest = json.loads(downloads[f"locations-{short_id(release.request_id)}-manifest.json"])
    region = Region(**manifest["estimated_region"])
    assert manifest["details"]["region"] == region.to_dict() and manifest["private_bounds"]["epsilon"] == 0.1
    at.switch_page("pages/ledger.py").run()  # the region step reads as part of its release
    (rows,) = [d.value for d in at.dataframe if "request id" in d.value.columns]
    assert rows["mechanism"].tolist()[-1] == f"↳ {LABEL} for {release.request_id}"

    at.session_state[MODE_KEY] = "demo"  # demo mode says so at the checkboxes, before any release
    at.switch_page("pages/locations.py").run()
    assert at.checkbox(key="loc_private_region").disabled
    assert any("Not available in demo mode" in c.value for c in at.caption)
    assert not any("estimates its region privately" in i.value for i in at.info)
