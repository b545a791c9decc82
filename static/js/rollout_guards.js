// The rollout page's statistical guards: each guard's estimate of candidate − stable, its
// anytime-valid interval and the tolerance over time (Plotly, from static/vendor), refreshed
// from GET /api/v1/fleets/<slug>/rollout/guards every few seconds with the verdict, the
// reason and each guard's sentence. The page's contract: #rollout-guards[data-guards-url],
// one <li> per guard in order, a chart <div data-guard-chart="<id of its JSON series>">.
(function () {
  "use strict";

  var REFRESH_MS = 5000;
  var root = document.getElementById("rollout-guards");
  if (!root || !window.Plotly) { return; }

  var FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 11, color: "#2b2f36" };
  var STATE_COLOURS = { regressed: "#b3261e", healthy: "#1d7a3d", inconclusive: "#8a5300", collecting: "#8b929c" };
  var charts = window.rolloutGuardCharts = { drawn: 0, refreshed: 0 };

  // A point about one cell (the one the guard acted on) rather than the whole fleet.
  function inCell(point) { return Boolean(point.scope) && point.scope !== "fleet"; }

  function isLatency(metric) { return metric === "p95_budget" || metric === "p99_budget"; }

  // Rates are shown in points (0.03 → 3), latency ratios in percent (0.2 → 20).
  function scaled(value) { return value === null || value === undefined ? null : value * 100; }

  function draw(el, series) {
    var metric = el.dataset.metric;
    var tolerance = parseFloat(el.dataset.tolerance) * 100;
    var unit = isLatency(metric) ? "%" : " pts";
    var x = series.map(function (p) { return p.at; });
    var upper = series.map(function (p) { return scaled(p.upper); });
    var lower = series.map(function (p) { return scaled(p.lower); });
    var estimate = series.map(function (p) { return scaled(p.estimate); });
    var traces = [
      { x: x, y: upper, mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false },
      { x: x, y: lower, mode: "lines", line: { width: 0 }, fill: "tonexty",
        fillcolor: "rgba(52, 101, 164, 0.18)", name: "interval", hoverinfo: "skip" },
      { x: x, y: estimate, mode: "lines+markers", name: "candidate − stable",
        line: { color: "#3465a4", width: 2 },
        marker: { size: 7, color: series.map(function (p) { return STATE_COLOURS[p.state] || "#8b929c"; }),
                  symbol: series.map(function (p) { return inCell(p) ? "diamond" : "circle"; }) },
        text: series.map(function (p) {
          return (inCell(p) ? p.scope : "fleet-wide") + " · " + p.state +
            (p.lower === null ? "" : " · " + scaled(p.lower).toFixed(1) + " to " + scaled(p.upper).toFixed(1) + unit);
        }),
        hovertemplate: "%{y:.1f}" + unit + " · %{text}<extra></extra>" }
    ];
    var layout = {
      font: FONT, height: 190, margin: { l: 48, r: 12, t: 6, b: 30 },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      showlegend: false,
      xaxis: { type: "date", tickformat: "%H:%M:%S", nticks: 6, gridcolor: "#eef0f3" },
      yaxis: { title: { text: isLatency(metric) ? "% slower" : "pts worse" }, zeroline: true,
               zerolinecolor: "#9aa1ab", gridcolor: "#eef0f3", ticksuffix: isLatency(metric) ? "%" : "" },
      shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: tolerance, y1: tolerance,
                 line: { color: "#b3261e", width: 1.5, dash: "dash" } }],
      annotations: [{ xref: "paper", x: 1, xanchor: "right", y: tolerance, yanchor: "bottom",
                      text: "tolerated " + (tolerance >= 0 ? "+" : "") + tolerance.toFixed(isLatency(metric) ? 0 : 1) + unit,
                      showarrow: false, font: { size: 10, color: "#b3261e" } }]
    };
    var last = series.length ? series[series.length - 1] : null;
    if (last && inCell(last) && last.estimate !== null) {
      // Where the line moves from the fleet to the cell the guard acted on, say which cell.
      layout.annotations.push({ x: last.at, y: scaled(last.estimate), xanchor: "right", yanchor: "bottom",
                                text: "◆ " + last.scope, showarrow: false, font: { size: 10, color: "#2b2f36" } });
    }
    if (!series.length) {
      layout.annotations.push({ xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
                                text: "not judged yet", font: { size: 12, color: "#8b929c" } });
    }
    window.Plotly.react(el, traces, layout, { displayModeBar: false, responsive: true });
    charts.drawn += 1;
  }

  function chartEls() { return Array.prototype.slice.call(root.querySelectorAll("[data-guard-chart]")); }

  chartEls().forEach(function (el) {
    var data = document.getElementById(el.dataset.guardChart);
    draw(el, data ? JSON.parse(data.textContent) : []);
  });

  function apply(payload) {
    var guards = payload && payload.guards;
    if (!guards) { return; }
    root.dataset.verdict = guards.verdict;
    var verdict = root.querySelector("[data-field=guard-verdict]");
    if (verdict) {
      verdict.textContent = guards.verdict_label;
      verdict.className = "alert-state alert-state-" + guards.verdict;
    }
    var reason = root.querySelector("[data-field=guard-reason]");
    if (reason) {
      reason.hidden = !guards.reason;
      reason.querySelector("[data-field=guard-reason-text]").textContent = guards.reason;
    }
    var items = root.querySelectorAll(".guard-list > li");
    guards.guards.forEach(function (guard, index) {
      var li = items[index];
      if (!li) { return; }
      li.dataset.guardState = guard.state;
      var state = li.querySelector(".alert-state");
      if (state) {
        state.textContent = guard.state === "insufficient" ? "too few events" : guard.state;
        state.className = "alert-state alert-state-" + guard.state;
      }
      var message = li.querySelector("[data-field=guard-message]");
      if (message) { message.textContent = guard.message || "not judged yet"; }
      var decide = li.querySelector("[data-field=guard-decide]");
      if (decide) {
        var plan = guard.decide;
        decide.hidden = !plan;
        decide.querySelector("[data-field=guard-decide-text]").textContent = plan ? plan.text : "";
        var sooner = decide.querySelector("[data-field=guard-decide-shorter]");
        sooner.hidden = !plan || !plan.shorter.length;
        sooner.textContent = plan && plan.shorter.length ? ". Sooner with " + plan.shorter.join("; ") : "";
      }
      var chart = li.querySelector("[data-guard-chart]");
      if (chart && guard.kind === "sequential") { draw(chart, guard.series); }
    });
    charts.refreshed += 1;
  }

  function refresh() {
    if (document.hidden) { return; }
    fetch(root.dataset.guardsUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(apply)
      .catch(function () { /* the next refresh tries again */ });
  }
  window.setInterval(refresh, REFRESH_MS);
})();
