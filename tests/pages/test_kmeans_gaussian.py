"""The K-means page releases the private summary mechanism: its public radius is a release parameter, the
ledger debits (eps, delta) from the differential-privacy account and the manifest records the accounting."""

from __future__ import annotations

import json

import pytest

from dpcore.data import load_sample
from dpcore.plan import policy_account
from dpcore.policy import ApproxDP
from tests.pages.test_kmeans import BOUNDS, _dataset, _errors, _ledger, _page
from tests.panel import release_button


def test_private_summary_release_records_its_radius_and_accounting(downloads) -> None:
    raw = load_sample("marketing_campaign")
    ds = _dataset(raw, "Marketing L2", features=list(BOUNDS), scaling="minmax", bounds=BOUNDS, missing="drop")
    policy = ApproxDP(1.0, 1e-6)
    ledger = _ledger(ds, 2.0, 1e-5, policy)
    at = _page(ds, dp_policy=policy)
    at.selectbox(key="km_rel_mech").set_value("lsh_coreset").run()
    at.number_input(key="km_rel_eps").set_value(1.0).run()
    at.number_input(key="km_rel_radius").set_value(1.2).run()  # min-max features: rows within 1.2 of centre
    release_button(at, "kmeans").click().run()
    assert not at.exception and not _errors(at)
    (record,) = ledger.releases(dataset_id=ds.dataset_id)
    assert record.definition == "approx_dp" and record.mechanism == "lsh_coreset"
    assert record.delta == pytest.approx(1e-6)
    assert ledger.remaining(policy_account(ds.dataset_id, policy)) == pytest.approx((1.0, 9e-6))
    manifest = json.loads(next(v for k, v in downloads.items() if k.endswith("-manifest.json")))
    assert manifest["parameters"]["radius"] == 1.2
    assert manifest["guarantee"].startswith("Differential privacy") and "δ = 1e-06" in manifest["guarantee"]
    accounting = manifest["details"]["gaussian_accounting"]
    assert accounting["epsilon_accounted"] <= 1.0 and accounting["delta"] == 1e-6
    assert "radius = 1.2" in manifest["details"]["ball"]
