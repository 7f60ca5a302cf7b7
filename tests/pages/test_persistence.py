"""Nothing resets silently and nothing is lost (AppTest): widget values survive leaving a page, every value
widget on every page is kept, and the session plan restores in a new browser session with the URL's token.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetStates
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
from streamlit.runtime.state.safe_session_state import SafeSessionState
from streamlit.testing.v1 import AppTest

from dpcore import config
from dpcore.data import fingerprint
from dpcore.ledger import Ledger
from dpcore.policy import GeoIndistinguishability
from tests.panel import release_button
from tests.paths import ROOT
from tests.prep_table import edit_table, table_cells
from ui.nav import registered_pages

TIMEOUT = 120
APP = str(ROOT / "app.py")
AIRPORTS = "Sample: US airports"
MARKETING = "Sample: Marketing Campaign"


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _by_label(widgets, label: str):
    (found,) = [w for w in widgets if w.label == label]
    return found


def _locations_with_airports() -> AppTest:
    at = _ok(AppTest.from_file(APP, default_timeout=TIMEOUT).run())
    at.switch_page("pages/locations.py").run()
    at.button(key="loc_load_airports").click().run()
    return _ok(at)


def test_locations_region_and_hs_survive_leaving_the_page():
    at = _locations_with_airports()
    _by_label(at.selectbox, "Public region").set_value("Europe (34, 72, -25, 45)").run()
    _by_label(at.selectbox, "Hierarchy level to protect HS (metres)").set_value("city").run()
    _by_label(at.number_input, "Clusters").set_value(12).run()
    _ok(at)
    at.switch_page("pages/ledger.py").run()
    at.switch_page("pages/locations.py").run()
    _ok(at)
    assert _by_label(at.selectbox, "Public region").value == "Europe (34, 72, -25, 45)"
    assert _by_label(at.selectbox, "Hierarchy level to protect HS (metres)").value == "city"
    assert _by_label(at.number_input, "Clusters").value == 12
    assert [_by_label(at.number_input, label).value for label in EDGES] == [34.0, 72.0, -25.0, 45.0]


EDGES = ("South edge (lat min)", "North edge (lat max)", "West edge (lon min)", "East edge (lon max)")


# -- the session plan: reload, deep link, restart, second tab --------------------------------------

LA_CSV = ("latitude,longitude,visitor\n" + "".join(
    f"{34.0 + 0.003 * i:.4f},{-118.45 + 0.004 * i:.4f},u{i % 9}\n" for i in range(63)
)).encode()


def _open(token: str | None = None) -> AppTest:
    """A new browser session (a reload, a deep link, a second tab or a restarted server)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if token is not None:
        at.query_params["s"] = token
    return _ok(at.run())


def test_a_token_is_created_once_and_kept_in_the_url():
    at = _open()
    token = at.query_params["s"]
    assert len(token) == 32 and int(token, 16) >= 0
    for page in ("pages/data.py", "pages/policy.py", "pages/home.py"):
        at.switch_page(page).run()
        assert _ok(at).query_params["s"] == token
    assert _open("not-a-token").query_params["s"] != "not-a-token"  # replaced, never trusted
    unknown = "0123456789abcdef" * 2  # a token the attacker chose, of the right form: never adopted
    fresh = _open(unknown)
    assert fresh.query_params["s"] != unknown and len(fresh.query_params["s"]) == 32
    assert any("unknown or has expired" in t.value for t in fresh.toast)
    assert _open(token).query_params["s"] == token  # a token this server issued opens its session


def test_dataset_cleaning_preparation_policy_and_widgets_restore_from_the_token():
    at = _open()
    token = at.query_params["s"]
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value(MARKETING).run()
    at.button(key="data_load_sample").click().run()
    at.selectbox(key="data_missing_strategy").set_value("drop").run()
    at.button(key="data_apply_missing").click().run()
    edit_table(at, features=["Income", "MntWines", "Education"])
    at.checkbox(key="data_bounds_ok").check().run()
    at.radio(key="data_scaling").set_value("minmax").run()
    at.button(key="data_prepare").click().run()
    before = _ok(at).session_state["dp_dataset"]
    assert before.prepared is not None and len(before.cleaned) == 2216
    at.switch_page("pages/policy.py").run()
    at.selectbox(key="pol_definition").set_value("geo_ind").run()
    at.number_input(key="pol_geo_level").set_value(2.0).run()
    at.number_input(key="pol_geo_radius").set_value(500.0).run()
    at.sidebar.radio(key="dp_mode").set_value("demo").run()
    at.sidebar.number_input(key="dp_seed").set_value(7).run()
    _ok(at)

    again = _open(token)  # reload / second tab / after a restart: nothing carried over but the token
    assert again.query_params["s"] == token
    after = again.session_state["dp_dataset"]
    assert (after.name, after.fingerprint, after.steps) == (MARKETING, before.fingerprint, before.steps)
    assert len(after.cleaned) == 2216 and after.cleaning == before.cleaning
    assert after.prepared.feature_names == before.prepared.feature_names
    assert (after.prepared.X == before.prepared.X).all() and after.prepared.leaks == before.prepared.leaks
    assert again.session_state["dp_policy"] == GeoIndistinguishability.from_level(2.0, 500.0)
    assert again.sidebar.radio(key="dp_mode").value == "demo"
    assert again.sidebar.number_input(key="dp_seed").value == 7
    assert any("level 2 within 500 m" in c.value for c in again.sidebar.caption)
    again.switch_page("pages/data.py").run()
    assert [table_cells(_ok(again), f)["feature"] for f in ("Income", "MntWines", "Education")] == [True] * 3
    assert again.radio(key="data_scaling").value == "minmax" and again.checkbox(key="data_bounds_ok").value
    again.switch_page("pages/policy.py").run()
    assert _ok(again).number_input(key="pol_geo_radius").value == 500.0


def test_uploaded_points_need_a_chosen_region_and_restore_from_the_data_folder(isolated_data_dir: Path):
    at = _open()
    token = at.query_params["s"]
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value(("la_points.csv", LA_CSV, "text/csv")).run()
    ds = _ok(at).session_state["dp_dataset"]
    assert (isolated_data_dir / "uploads" / f"{ds.fingerprint}.parquet").exists()
    assert ds.fingerprint == fingerprint(ds.raw) and ds.n_rows == 63

    at.switch_page("pages/locations.py").run()
    region = _by_label(_ok(at).selectbox, "Public region")
    assert region.value is None  # never a default region for the curator's own file
    assert any("Choose a public region" in i.value for i in at.info)
    assert "loc_run" not in [b.key for b in at.button]  # nothing runs on a region nobody chose
    region.set_value("Custom (enter the box below)").run()
    for label, edge in zip(EDGES, (33.7, 34.4, -118.7, -117.9), strict=True):
        _by_label(at.number_input, label).set_value(edge).run()
    assert "loc_run" in [b.key for b in _ok(at).button]
    assert not any("outside the public region" in w.value for w in at.warning)

    again = _open(token)
    assert again.session_state["dp_dataset"].fingerprint == ds.fingerprint
    again.switch_page("pages/locations.py").run()
    assert _by_label(_ok(again).selectbox, "Public region").value == "Custom (enter the box below)"
    assert [_by_label(again.number_input, label).value for label in EDGES] == [33.7, 34.4, -118.7, -117.9]


def test_two_tabs_of_one_session_keep_each_others_changes():
    first = _locations_with_airports()
    token = first.query_params["s"]
    _by_label(first.selectbox, "Hierarchy level to protect HS (metres)").set_value("city").run()
    second = _open(token)  # a second tab: the same state
    second.switch_page("pages/locations.py").run()
    assert _by_label(_ok(second).selectbox, "Hierarchy level to protect HS (metres)").value == "city"
    _by_label(second.number_input, "Clusters").set_value(12).run()
    _by_label(first.number_input, "Trials per ε").set_value(5).run()  # the first tab knows nothing of 12
    third = _open(token)
    third.switch_page("pages/locations.py").run()
    assert _by_label(_ok(third).selectbox, "Hierarchy level to protect HS (metres)").value == "city"
    assert _by_label(third.number_input, "Clusters").value == 12
    assert _by_label(third.number_input, "Trials per ε").value == 5


def test_another_users_link_starts_a_new_session(monkeypatch: pytest.MonkeyPatch):
    at = _open()
    token = at.query_params["s"]
    at.switch_page("pages/locations.py").run()
    at.button(key="loc_load_airports").click().run()
    monkeypatch.setenv("DPCORE_USER", "someone-else")
    other = _open(token)
    assert other.query_params["s"] != token and "dp_dataset" not in other.session_state


def test_geo_indistinguishability_is_set_on_the_policy_page_only():
    at = _locations_with_airports()
    labels = {w.label for kind in ("number_input", "radio", "selectbox") for w in at.get(kind)}
    assert not {"Give ε as", "Level l", "ε per metre"} & labels
    assert not any("radius" in label.lower() for label in labels)
    assert any(link.label == "Set it on the Privacy policy page" for link in at.page_link)
    at.switch_page("pages/policy.py").run()
    at.selectbox(key="pol_definition").set_value("geo_ind").run()
    assert not any(r.label == "Give ε as" for r in at.radio)  # one way to set it: level l within r
    at.number_input(key="pol_geo_level").set_value(2.0).run()
    at.number_input(key="pol_geo_radius").set_value(500.0).run()
    at.number_input(key="pol_budget_eps").set_value(5.0).run()
    at.text_input(key="pol_budget_reason").input("test budget").run()
    _by_label(at.button, "Save budget").click().run()
    at.switch_page("pages/locations.py").run()
    text = " ".join(m.value for m in _ok(at).markdown)
    assert "level **l = 2 within r = 500 m** (ε = 0.004 per metre)" in text
    assert at.selectbox(key="loc_rel_mech").value == "planar_laplace"
    release_button(at, "locations").click().run()
    assert not _ok(at).error, [e.value for e in at.error]
    (record,) = Ledger(config.ledger_url()).releases(dataset_id=at.session_state["dp_dataset"].dataset_id)
    assert (record.definition, record.epsilon) == ("geo_ind", 2.0)  # the release spends level l exactly
    assert "500 m" in record.relation and record.parameters["radius_m"] == 500.0


# -- every value widget on every page is kept ------------------------------------------------------

VALUE_WIDGETS = {
    "checkbox",
    "color_picker",
    "date_input",
    "multiselect",
    "number_input",
    "pills",
    "radio",
    "segmented_control",
    "select_slider",
    "selectbox",
    "slider",
    "text_area",
    "text_input",
    "time_input",
    "toggle",
}
KEEPERS = {"persist", "_kept"}  # ui.state.persist and the Privacy policy page's wrapper around it
NOT_KEPT = {  # (file, key text): why the value is deliberately not kept
    ("pages/policy.py", "'pol_budget_eps'"): "shows the ledger's saved budget until Save is pressed",
    ("pages/policy.py", "'pol_budget_delta'"): "shows the ledger's saved budget until Save is pressed",
    ("pages/policy.py", "'pol_budget_reason'"): "each budget change is given its own reason",
    ("pages/policy.py", "f'pol_rule_{account.key}'"): "shows the ledger's approval rule until saved",
    ("pages/policy.py", "f'pol_rule_threshold_{account.key}'"): "shows the ledger's rule until saved",
    ("pages/policy.py", "f'pol_rule_reason_{account.key}'"): "each rule change is given its own reason",
    ("pages/requests.py", "f'req_reason_{request.ticket}'"): "each decision is given its own reason",
    ("ui/release.py", "f'{key}_again_{next_id}'"): "spending again is confirmed anew each time",
    ("pages/data.py", "f'data_name_{ds.dataset_id}'"): "shows the dataset's name (kept with the dataset) "
    "until Use this name is pressed",
}


def _keeper(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in KEEPERS


def test_every_value_widget_goes_through_the_keeper():
    """A value widget not drawn in a run loses its value (Streamlit drops it): each must be kept by
    ``ui.state.persist`` (which also saves it with the session), be disabled (display only), or be
    listed in NOT_KEPT with the reason. This is how a reset like the Locations region's cannot return."""
    offenders = []
    for path in sorted([*ROOT.glob("pages/*.py"), *ROOT.glob("ui/*.py")]):
        tree = ast.parse(path.read_text())
        kept_names = {
            t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and _keeper(n.value)
            for t in n.targets if isinstance(t, ast.Name)
        }
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) in VALUE_WIDGETS):
                continue
            kw = {k.arg: k.value for k in call.keywords}
            if isinstance(kw.get("disabled"), ast.Constant) and kw["disabled"].value is True:
                continue
            key = kw.get("key")
            ok = key is not None and (_keeper(key) or (isinstance(key, ast.Name) and key.id in kept_names))
            where = (str(path.relative_to(ROOT)), ast.unparse(key) if key is not None else "")
            if not ok and where not in NOT_KEPT:
                offenders.append(f"{where[0]}:{call.lineno} {call.func.attr}(key={where[1] or 'none'})")
    assert not offenders, "value widgets not kept across pages:\n" + "\n".join(offenders)


def _typing_only(node: ast.stmt) -> bool:
    """``if TYPE_CHECKING:`` imports for annotations, which never run."""
    return isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"


def test_every_page_starts_with_the_entry_point():
    """A page that runs without app.py (the first request after a restart, a deep link) must draw the
    real navigation, the sidebar and restore the session before anything else."""
    for path, _, _ in registered_pages():
        body = ast.parse((ROOT / path).read_text()).body
        skipped = ast.Import | ast.ImportFrom | ast.Expr | ast.Assign
        first = next(n for n in body if (not isinstance(n, skipped) and not _typing_only(n))
                     or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)))
        assert ast.unparse(first) == "ensure_entrypoint()", path


def test_a_session_url_opened_by_another_user_is_not_restored(monkeypatch: pytest.MonkeyPatch):
    """The plan keeps a hash of its owner's name; another identity opening the URL gets a new, empty
    session (with sign-in, the verified identity; here the local user name stands for it)."""
    monkeypatch.setenv("DPCORE_USER", "alice")
    at = _open()
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Sample: US airports").run()
    at.button(key="data_load_sample").click().run()
    token = at.query_params["s"]
    assert _open(token).session_state["dp_dataset"] is not None  # alice again: restored
    monkeypatch.setenv("DPCORE_USER", "bob")
    other = _open(token)
    assert other.query_params["s"] != token and "dp_dataset" not in other.session_state
    assert any("belongs to another user's session" in t.value for t in other.toast)


def _shown(widget) -> float | None:
    """What a browser that has no state of its own for this number input shows: the value the server
    sets (``set_value``), else the widget's default."""
    p = widget.proto
    if p.set_value:
        return p.value
    return p.default if p.HasField("default") else None


def test_a_click_during_the_restore_keeps_the_region_box(isolated_data_dir: Path, monkeypatch):
    """A second tab whose first run (the restore) is interrupted by the curator's click after the first
    edge was drawn: Streamlit drops the interrupted run's unsent messages, so the browser never received
    that edge. The next run must still send its kept value (before the fix it sent none, and the browser
    showed the edge empty, then sent the empty value back over the kept one)."""
    at = _open()
    token = at.query_params["s"]
    at.switch_page("pages/data.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="data_upload").set_value(("la_points.csv", LA_CSV, "text/csv")).run()
    at.switch_page("pages/locations.py").run()
    _by_label(_ok(at).selectbox, "Public region").set_value("Custom (enter the box below)").run()
    box = (33.7, 34.4, -118.7, -117.9)
    for label, edge in zip(EDGES, box, strict=True):
        _by_label(at.number_input, label).set_value(edge).run()
    ds_id = _ok(at).session_state["dp_dataset"].dataset_id

    # Streamlit serves a pending rerun request at the next session-state access: here, while the second
    # edge is kept; the click carries no state for the first edge (the browser never received it)
    original = SafeSessionState.__setitem__
    armed = [True]

    def setitem(self, key: str, value: object) -> None:
        if armed[0] and key == f"dp_owner::loc_box_1_{ds_id}":
            armed[0] = False
            ctx = get_script_run_ctx()
            data = RerunData(ctx.query_string, WidgetStates(), page_script_hash=ctx.page_script_hash)
            raise RerunException(data)
        original(self, key, value)

    monkeypatch.setattr(SafeSessionState, "__setitem__", setitem)
    second = AppTest.from_file(APP, default_timeout=TIMEOUT)
    second.query_params["s"] = token
    second.switch_page("pages/locations.py").run()  # the restore run, on the Locations page
    assert not armed[0]  # the click did interrupt the restore run
    assert [_shown(_by_label(_ok(second).number_input, label)) for label in EDGES] == list(box)
