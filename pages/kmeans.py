"""K-means: compare the registered mechanisms (diagnostics), then release one.

Diagnostics read the raw data and cost no budget; the release runs one mechanism once, debits the ledger
once (``ui.release.release_panel``) and is the only output meant to leave. A local mechanism is released
under its own local guarantee; when the current policy is a DP definition, the page asks for an explicit
acknowledgement before it offers the release. Every mechanism, its widgets (from its declared parameters;
those that follow the policy come from it), its note, metrics and noise ellipses come from its registry
spec. A K that leaves a one-row cluster blocks the local mechanisms only. Widget values are kept across
pages (``ui.state.persist``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import streamlit as st

from dpcore import plots
from dpcore.data import PreparedData
from dpcore.kmeans import local_unavailable
from dpcore.kmeans.registry import KMEANS, N_CLUSTERS, KMeansInputs, declared_metrics
from dpcore.kmeans.sweep import MAX_TRIALS, check_comparison
from dpcore.registry import Param, guarantee_name
from ui import accuracy, state
from ui import kmeans_view as view
from ui.errors import user_errors
from ui.nav import ensure_entrypoint
from ui.release import current_plan, release_panel, stale_reason
from ui.requests_view import sweep_evidence
from ui.text import md

if TYPE_CHECKING:
    import numpy as np

ensure_entrypoint()

SWEEP_KEY = "km_sweep"
JOB_KEY = "km_job"  # the comparison running in the background (ui.kmeans_view.SweepJob)
JOB_NOTE_KEY = "km_job_note"  # why the last background comparison ended without a result
POLL_S = 0.3  # seconds between two looks at a background comparison
ELBOW_MAX_K = 10
LOCAL_BADGE = "not ε-DP: calibrated on this dataset"
DIAGNOSTIC_BANNER = (
    "**Diagnostics (non-private).** Everything above the Release section uses the raw data (true "
    "clustering, true centres, losses over many noisy trials). It costs no budget and is for the curator "
    "only: do not share these charts."
)


def _label(key: str) -> str:
    return KMEANS[key].label


def _markdown(text: str) -> str:
    """``text`` with Markdown's emphasis characters escaped (formulas use * and _)."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_")


def _mechanism_header(key: str, *, summary: bool = True) -> None:
    """The local badge; with ``summary``, the plain sentence and, on request, the formula and sources."""
    spec = KMEANS[key]
    if not spec.is_dp:
        st.badge(LOCAL_BADGE, icon=":material/warning:", color="red")
    if summary:
        st.caption(spec.summary)
        with st.expander("Formula and source"):
            st.markdown(_markdown(spec.formula))
            st.caption(f"Source: {spec.citation}.")


def _data_summary(prep: PreparedData) -> None:
    st.markdown(
        f"**{prep.n_samples:,} rows × {prep.n_features} features** "
        f"({', '.join(map(md, prep.feature_names))}) · scaling: **{prep.scaling}** · "
        f"bounds: **{prep.bounds_source}**"
    )
    for leak in prep.leaks:
        st.caption(f"Leak recorded by the Data page: {md(leak.text)}")


def _whole_in(low: int, high: int) -> Callable[[Any], bool]:
    """A kept widget value is reused only if it is a whole number within the widget's limits."""
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _choose_k(key: str, prep: PreparedData) -> int:
    max_k = int(N_CLUSTERS.high)  # type: ignore[arg-type]
    k = int(
        st.number_input(
            "K (number of clusters)",
            min_value=1,
            max_value=max_k,
            step=1,
            key=state.persist("km_k", 4, _whole_in(1, max_k)),
        )
    )
    with st.expander("Elbow chart (non-private diagnostic, costs no budget)", expanded=True):
        ks = tuple(range(1, min(ELBOW_MAX_K, prep.n_samples) + 1))
        with user_errors("computing the elbow chart"):
            wcss = view.elbow(key, prep.X, ks)
            elbow = view.figure("elbow", f"{key}|{ks}|{k}", lambda: plots.elbow(ks, wcss, chosen_k=k))
            st.plotly_chart(elbow, key="km_elbow")
            if note := view.elbow_note(prep.n_samples):
                st.caption(note)
    if k < 2:
        st.error("K = 1 puts every row in one cluster: there is nothing to compare. Choose K ≥ 2.")
        st.stop()
    return k


def _param_widget(param: Param, key: str, where: Any = st) -> Any:
    """One widget for a declared parameter: a select box for choices, else a number input in its range."""
    if param.choices is not None:
        return where.selectbox(
            param.label,
            list(param.choices),
            format_func=param.choice_label or str,
            key=state.persist(key, param.default, param.choices.__contains__),
            help=param.help or None,
        )
    if param.kind is int:
        low, high = int(param.low), int(param.high)  # type: ignore[arg-type]
        return int(
            where.number_input(
                param.label,
                min_value=low,
                max_value=high,
                step=1,
                key=state.persist(key, int(param.default), _whole_in(low, high)),
                help=param.help or None,
            )
        )
    return float(
        where.number_input(
            param.label,
            min_value=float(param.low),  # type: ignore[arg-type]
            max_value=float(param.high),  # type: ignore[arg-type]
            format="%.4g",
            key=state.persist(key, float(param.default)),
            help=param.help or None,
        )
    )


def _widgets(params: list[Param], prefix: str) -> dict[str, Any]:
    """The widgets of ``params``, keyed ``<prefix><name>``, in rows of up to three; their values by name."""
    values: dict[str, Any] = {}
    for start in range(0, len(params), 3):
        row = params[start : start + 3]
        for col, param in zip(st.columns(len(row)), row, strict=True):
            values[param.name] = _param_widget(param, f"{prefix}{param.name}", col)
    return values


def _note(mech: str, prep: PreparedData, params: dict[str, Any]) -> None:
    """The mechanism's declared note (a diagnostic sentence; may read the data) and the parameters that
    follow the privacy policy."""
    spec = KMEANS[mech]
    for p in spec.params:
        if p.from_policy is not None:
            value = (p.choice_label or str)(params[p.name])
            st.caption(f"{p.label}, from the Privacy policy page: {value}. {p.help}")
    if spec.note is None:
        return
    with user_errors(f"writing the note of {spec.label}"):
        inputs = KMeansInputs.from_prepared(prep)
        st.caption(view.note_text(view.data_key(prep), mech, inputs, json.dumps(params, sort_keys=True)))


def _blocked_error(blocked: str) -> None:
    names = ", ".join(s.label for s in KMEANS.values() if not s.is_dp)
    st.error(f"{names}: unavailable for this K, so left out of the comparison and the release: {blocked}")


def _compare_inputs(key: str, prep: PreparedData, k: int, blocked: str | None) -> view.SweepParams | None:
    st.subheader("Mechanisms to compare")
    chosen = []
    comparable = {m: spec for m, spec in KMEANS.items() if spec.trial is not None}
    pol = state.policy()
    last_local = ([m for m, spec in comparable.items() if not spec.is_dp] or [None])[-1]
    for mech, spec in comparable.items():
        label = spec.label + (" (slower: runs in the background)" if view.always_background(spec) else "")
        if not spec.is_dp and blocked:
            st.checkbox(label, value=False, disabled=True, key=f"km_mech_{mech}_blocked")
        elif st.checkbox(label, key=state.persist(f"km_mech_{mech}", view.compared_by_default(spec))):
            chosen.append(mech)
        _mechanism_header(mech)
        if mech == last_local and blocked:
            _blocked_error(blocked)
        _note(mech, prep, view.release_params(mech, k, pol))
    if not chosen:
        st.info("Tick at least one mechanism to compare.")
        return None
    specs = [KMEANS[m] for m in chosen]
    a, b, d = st.columns(3)
    lo, hi = a.select_slider(
        "ε range (log grid)",
        options=view.EPS_OPTIONS,
        value=(0.1, 10.0),  # a pair makes it a range slider; the kept value in session state wins
        key=state.persist(
            "km_eps_range",
            (0.1, 10.0),
            lambda v: isinstance(v, (tuple, list)) and all(e in view.EPS_OPTIONS for e in v),
        ),
    )
    grid = tuple(e for e in view.EPS_OPTIONS if lo <= e <= hi)
    delta = b.number_input(
        "δ (Gaussian mechanisms)",
        min_value=0.0,
        max_value=1.0,
        format="%.1e",
        step=1e-6,
        key=state.persist("km_delta", float(pol.delta) if 0 < pol.delta < 1 else 1e-5),
    )
    trials = int(
        d.number_input(
            "Trials per ε",
            min_value=1,
            max_value=MAX_TRIALS,
            key=state.persist("km_trials", 20, _whole_in(1, MAX_TRIALS)),
        )
    )
    with st.container():  # always drawn: ticking a mechanism with parameters moves nothing below it
        values = _widgets(view.widget_params(specs), "km_")
        slow = [s.label for s in specs if view.always_background(s)]
        if slow:
            st.caption(f"{', '.join(slow)}: runs in the background; keep working, or cancel it.")
    values.update(view.policy_values(specs, pol))
    with user_errors("checking the comparison's settings") as outcome:
        check_comparison(chosen, grid, float(delta), {**values, "n_clusters": k})
    if outcome.failed:
        return None
    return view.SweepParams(
        k=k,
        mechanisms=tuple(chosen),
        eps=grid,
        trials=trials,
        delta=float(delta),
        values=tuple(sorted(values.items())),
    )


def _run(key: str, prep: PreparedData, labels: np.ndarray, params: view.SweepParams) -> None:
    """A comparison this server already ran shows at once; a long one starts in the background
    (:func:`_job_panel`); a short one runs now under a progress bar."""
    hit = view.cached_sweep(key, params)
    if hit is not None:
        st.session_state[SWEEP_KEY] = hit
        return
    if view.runs_in_background(params):
        st.session_state[JOB_KEY] = view.start_sweep(key, prep, labels, params)
        st.rerun()  # redraw with the Run button disabled and the progress panel
    bar = st.progress(0.0, text="Starting the comparison...")

    def progress(fraction: float, message: str) -> None:
        bar.progress(float(min(max(fraction, 0.0), 1.0)), text=message)

    with user_errors("running the comparison"):
        st.session_state[SWEEP_KEY] = view.run_sweep(key, prep, labels, params, progress)
    bar.empty()


@st.fragment(run_every=POLL_S)
def _job_panel() -> None:
    """A background comparison's progress bar and Cancel button (this part alone reruns every
    ``POLL_S``); when it ends, its result (or error, or cancellation) goes to the page in a full rerun."""
    job: view.SweepJob | None = st.session_state.get(JOB_KEY)
    if job is None:
        return
    if not job.running:
        del st.session_state[JOB_KEY]
        if job.result is not None:
            st.session_state[SWEEP_KEY] = job.result
        elif job.error is not None:
            st.session_state[JOB_NOTE_KEY] = ("error", job.error)
        else:
            st.session_state[JOB_NOTE_KEY] = ("info", "Comparison cancelled: the charts below are unchanged.")
        st.rerun()
    if job.cancel.is_set():
        st.progress(job.fraction, text="Cancelling...")
        return
    st.progress(job.fraction, text=f"{job.message} · {job.elapsed:.0f} s (runs in the background)")
    if st.button("Cancel the comparison", key="km_cancel", icon=":material/cancel:"):
        job.cancel.set()
        st.rerun(scope="fragment")


@st.fragment
def _explore(result: view.SweepResult, prep: PreparedData, labels: np.ndarray) -> None:
    """Single-ε view: embedding, populations, violins; reruns alone (the sweep is not recomputed)."""
    params = result.params
    a, b = st.columns(2)
    eps = a.select_slider(
        "ε for the detailed view",
        options=params.eps,
        key=state.persist("km_view_eps", params.eps[len(params.eps) // 2], params.eps.__contains__),
    )
    mechs = params.mechanisms
    shown_key = state.persist("km_view_mech", mechs[0], mechs.__contains__)
    shown = b.selectbox("Mechanism shown", mechs, format_func=_label, key=shown_key)
    notes = st.container()  # the badge and caveats come and go; the charts below keep their places
    with notes:
        _mechanism_header(shown, summary=False)
    with user_errors("drawing the detailed view") as outcome:
        bounds = (prep.lower, prep.upper)
        args = (result.key, prep.X, labels, bounds, params.k)
        values = json.dumps(dict(params.values), sort_keys=True)
        draw = view.diagnostic_draw(*args, shown, float(eps), params.delta, values)
        with_covariance = [m for m in params.mechanisms if KMEANS[m].covariance is not None]
        ellipses = {
            m: view.diagnostic_draw(*args, m, float(eps), params.delta, values) for m in with_covariance
        }
    if outcome.failed:
        return
    for caveat in draw.caveats:
        notes.warning(caveat)
    if ellipses:
        cols = st.columns(len(ellipses))
        for col, (m, d) in zip(cols, ellipses.items(), strict=True):
            gap = f" · optimality gap ≤ {d.gap:.1%}" if d.gap else ""
            col.metric(
                f"{_label(m)}: total noise variance tr(Σ)", f"{d.noise_trace:.4g}", help=f"ε = {eps:g}{gap}"
            )
    level = st.radio(
        "Noise ellipses",
        ["1sigma", "95%"],
        format_func={"1sigma": "1 standard deviation", "95%": "95% of the noise"}.get,
        horizontal=True,
        key=state.persist("km_view_level", "1sigma", ("1sigma", "95%").__contains__),
    )
    true_centers = view.true_clustering(result.key, prep.X, params.k)[1]
    name = view.draw_name(result.key, params, shown, float(eps))
    fig = view.figure(
        "embedding",
        f"{name}|{with_covariance}|{level}",
        lambda: plots.embedding(
            prep.X,
            true_centers,
            draw.noisy_centers,
            {m: d.covariance for m, d in ellipses.items()},
            labels=labels,
            noisy_name=f"{_label(shown)} centres (ε = {eps:g})",
            level=level,
        ),
    )
    st.plotly_chart(fig, key="km_embedding")
    without = [_label(m) for m in params.mechanisms if KMEANS[m].covariance is None]
    none = f"; {', '.join(without)}: no noise covariance to draw (e.g. noise over several rounds)"
    what = "Each ellipse is a mechanism's noise covariance (isotropic noise draws a circle)"
    st.caption(f"{what}{none if without else ''}.")
    left, right = st.columns([2, 1])
    populations = view.figure("populations", name, lambda: plots.population_table_figure(draw.populations))
    left.plotly_chart(populations, key="km_populations")
    right.dataframe(draw.populations)
    ds = state.dataset()
    numeric = [c for c in ds.schema.columns("numeric") if c in prep.frame.columns] if ds else []
    columns = st.multiselect(  # none by default: each violin chart adds about a second to every rerun
        "Columns for the per-cluster violins",
        numeric,
        key=state.persist("km_violins", [], lambda v: all(c in numeric for c in v)),
        placeholder="Pick columns to compare their distributions per cluster (true vs noisy labels)",
    )
    for column in columns:
        with user_errors(f"drawing the violins of {column}"):
            fig = view.figure(
                "violins",
                f"{name}|{column}",
                lambda column=column: plots.violins(
                    prep.frame, column, labels, draw.noisy_labels, noisy_name=f"{_label(shown)} labels"
                ),
            )
            st.plotly_chart(fig, key=f"km_violin_{column}")


@st.fragment
def _loss_chart(result: view.SweepResult) -> None:
    """The metric picker and the loss-vs-ε chart; a new metric reruns this part alone."""
    declared = [m for m in declared_metrics(result.params.mechanisms) if m.name in result.frame.columns]
    titles = {m.name: m.title for m in declared}
    metrics = list(titles)
    metric_key = state.persist("km_metric", metrics[0], metrics.__contains__)
    metric = st.selectbox("Metric", metrics, format_func=titles.__getitem__, key=metric_key)
    name = f"{result.key}|{result.params.key()}|{metric}"
    st.plotly_chart(view.figure("loss", name, lambda: plots.loss_vs_eps(result.frame, metric)), key="km_loss")


def _compare(key: str, prep: PreparedData, k: int, labels: np.ndarray, blocked: str | None) -> None:
    st.header("2. Compare mechanisms (diagnostics)")
    params = _compare_inputs(key, prep, k, blocked)
    busy = JOB_KEY in st.session_state
    clicked = st.button("Run comparison", type="primary", disabled=params is None or busy, key="km_run")
    # Messages that come and go live in one container: the charts below keep their places in the page,
    # so the browser updates them instead of drawing them anew (a second or more per rerun).
    status = st.container()
    with status:
        if clicked and params:
            _run(key, prep, labels, params)
        if JOB_KEY in st.session_state:
            _job_panel()
        if JOB_NOTE_KEY in st.session_state:
            kind, text = st.session_state.pop(JOB_NOTE_KEY)
            (st.error if kind == "error" else st.info)(text)
    result: view.SweepResult | None = st.session_state.get(SWEEP_KEY)
    if (result is None or result.key != key) and params is not None:
        result = view.cached_sweep(key, params)  # this server ran it already (another visit or tab)
        if result is not None:
            st.session_state[SWEEP_KEY] = result
    if result is None or result.key != key:
        status.info("Press Run comparison to compare the mechanisms over the ε range (costs no budget).")
        return
    with status:
        if params is None or result.params.key() != params.key():
            st.caption("The settings changed since this comparison ran: press Run comparison to update it.")
        for note in result.notes:
            st.warning(note)
        if result.sample:
            st.info(result.sample, icon=":material/filter_alt:")
    _loss_chart(result)
    releasable = [m for m, s in KMEANS.items() if s.is_dp or not blocked]
    accuracy.kmeans_eps_finder(result.frame, releasable, result.params.k)
    _explore(result, prep, view.true_clustering(key, prep.X, result.params.k)[0])


def _release(prep: PreparedData, k: int, labels: np.ndarray, blocked: str | None) -> None:
    st.header("3. Release (the only output meant to leave)")
    pol = state.policy()
    options = [m for m, spec in KMEANS.items() if spec.is_dp or not blocked]
    if blocked:
        st.caption(f"Local mechanisms are not offered for this K: {blocked}")
    a, b, c = st.columns(3)
    mech = a.selectbox(
        "Mechanism to release",
        options,
        format_func=_label,
        key=state.persist(
            "km_rel_mech", next((m for m in options if KMEANS[m].is_dp), options[0]), options.__contains__
        ),
    )
    spec = KMEANS[mech]
    default_eps = float(getattr(pol, "level", pol.epsilon))
    eps = float(
        b.number_input(
            "ε to spend", min_value=0.0, format="%.4g", key=state.persist("km_rel_eps", default_eps)
        )
    )
    delta = 0.0
    params = view.release_params(mech, k, pol)
    if spec.needs_delta:
        delta = float(
            c.number_input(
                "δ to spend",
                min_value=0.0,
                max_value=1.0,
                format="%.1e",
                step=1e-7,
                key=state.persist("km_rel_delta", float(pol.delta) if 0 < pol.delta < 1 else 1e-6),
            )
        )
    params.update(_widgets([p for p in view.widget_params([spec]) if p is not spec.trials], "km_rel_"))
    _mechanism_header(mech, summary=False)
    _note(mech, prep, params)
    plan = current_plan("kmeans", mech, epsilon=eps, delta=delta, params=params)
    if plan is not None:
        st.caption(f"Guarantee: {guarantee_name(spec, plan.params)}.")
    if plan is not None and spec.covariance is not None:
        with user_errors("checking the noise"):
            values = json.dumps({n: v for n, v in params.items() if n != "n_clusters"}, sort_keys=True)
            args = (view.data_key(prep), prep.X, labels, (prep.lower, prep.upper), k)
            for caveat in view.diagnostic_draw(*args, mech, eps, delta, values).caveats:
                st.warning(md(caveat))
    inputs = KMeansInputs.from_prepared(prep, labels)
    result: view.SweepResult | None = st.session_state.get(SWEEP_KEY)
    compared = {"K": result.params.k} if result is not None and result.key == view.data_key(prep) else None
    frame = result.frame if compared is not None else None
    metric = next((m.name for m in spec.metrics if frame is not None and m.name in frame.columns), None)
    chart = None if metric is None else lambda: plots.loss_vs_eps(frame, metric)
    evidence = sweep_evidence(frame, mech, eps, chart)
    release_panel(
        key="kmeans", plan=plan, inputs=inputs, stale=stale_reason(compared, {"K": k}), evidence=evidence
    )


st.title("K-means")
dataset, prepared = state.require_prepared()
st.warning(DIAGNOSTIC_BANNER, icon=":material/visibility:")
st.header("1. Features and K")
_data_summary(prepared)
data_key = view.data_key(prepared)
K = _choose_k(data_key, prepared)
with user_errors("clustering the data") as clustered:
    true_labels = view.true_clustering(data_key, prepared.X, K)[0]
if clustered.failed:
    st.stop()
local_blocked = local_unavailable(true_labels)
_compare(data_key, prepared, K, true_labels, local_blocked)
st.divider()
_release(prepared, K, true_labels, local_blocked)
