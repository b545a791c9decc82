// The calibration page: one Plotly chart per calibrated cell (Plotly served locally), θ along
// the bottom; α and the cloud share in % on the left axis; on the right the predicted P95
// against the cell's budget, or for a cost target the cost per hour against the ceiling.
// The chosen θ is a marked vertical line, the current θ a dashed one. The figures are in the
// page's tables too: without JavaScript nothing but the charts is lost.
(function () {
  "use strict";

  var chartsNode = document.getElementById("calibration-charts");
  var targetNode = document.getElementById("calibration-target");
  var FONT = { family: "system-ui, -apple-system, 'Segoe UI', Roboto, 'Liberation Sans', sans-serif", size: 12, color: "#1c2430" };
  var COLOURS = { alpha: "#2f9e5b", cloud: "#2f6fd6", right: "#b45309", chosen: "#1c2430", current: "#6b7685" };

  // The value box means nothing for the P95 target: hide it there.
  var kind = document.getElementById("calib-kind");
  var valueField = document.getElementById("calib-value-field");
  function syncValue() { if (kind && valueField) { valueField.hidden = kind.value === "p95_within_budget"; } }
  if (kind) { kind.addEventListener("change", syncValue); syncValue(); }

  if (!chartsNode || !window.Plotly) { return; }
  var cells = JSON.parse(chartsNode.textContent);
  var target = targetNode ? JSON.parse(targetNode.textContent) : { kind: "alpha" };
  var costTarget = target.kind === "cost_ceiling";

  function pct(values) { return values.map(function (v) { return v === null ? null : v * 100; }); }

  function draw(el, cell) {
    var thetas = cell.curve.map(function (p) { return p.threshold; });
    var right = cell.curve.map(function (p) { return costTarget ? p.cost_per_hour : p.p95_ms; });
    var rightName = costTarget ? "cost / h" : "P95 ms";
    var chosenRight = costTarget ? cell.chosen.cost_per_hour : cell.chosen.p95_ms;
    var traces = [
      { x: thetas, y: pct(cell.curve.map(function (p) { return p.alpha; })), name: "α (device %)", mode: "lines", line: { color: COLOURS.alpha, width: 2 }, hovertemplate: "θ %{x:.2f}: α %{y:.1f}%<extra></extra>" },
      { x: thetas, y: pct(cell.curve.map(function (p) { return p.cloud_share; })), name: "cloud %", mode: "lines", line: { color: COLOURS.cloud, width: 2 }, hovertemplate: "θ %{x:.2f}: cloud %{y:.1f}%<extra></extra>" },
      { x: thetas, y: right, name: rightName, yaxis: "y2", mode: "lines", connectgaps: true, line: { color: COLOURS.right, width: 1.5, dash: "dot" }, hovertemplate: "θ %{x:.2f}: %{y:.4~g}<extra>" + rightName + "</extra>" },
      { x: [cell.chosen.threshold], y: [cell.chosen.alpha * 100], name: "chosen θ " + cell.chosen.threshold.toFixed(3), mode: "markers", marker: { color: COLOURS.chosen, size: 10, symbol: "diamond" }, hovertemplate: "chosen θ %{x:.3f}: α %{y:.1f}%<extra></extra>" }
    ];
    var shapes = [
      { type: "line", xref: "x", yref: "paper", x0: cell.chosen.threshold, x1: cell.chosen.threshold, y0: 0, y1: 1, line: { color: COLOURS.chosen, width: 1.5 } },
      { type: "line", xref: "x", yref: "paper", x0: cell.current.threshold, x1: cell.current.threshold, y0: 0, y1: 1, line: { color: COLOURS.current, width: 1, dash: "dash" } }
    ];
    var limit = costTarget ? target.value : cell.budget_ms;
    if (limit !== null && limit !== undefined) {
      traces.push({ x: [0, 1], y: [limit, limit], yaxis: "y2", mode: "lines", hoverinfo: "skip", name: costTarget ? "ceiling " + limit : "budget " + limit + " ms", line: { color: COLOURS.right, width: 1, dash: "dash" } });
    }
    var layout = {
      font: FONT, margin: { l: 44, r: 52, t: 16, b: 64 }, height: 280,
      paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff", showlegend: true,
      legend: { orientation: "h", x: 0, y: -0.3, font: { size: 11 } },
      xaxis: { title: { text: "θ", standoff: 4 }, range: [0, 1], dtick: 0.2, gridcolor: "#eef1f5", zeroline: false },
      yaxis: { title: { text: "%", standoff: 2 }, range: [0, 100], gridcolor: "#eef1f5", zeroline: false },
      yaxis2: { title: { text: rightName, standoff: 2 }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false, zeroline: false },
      shapes: shapes,
      annotations: [{ x: cell.current.threshold, y: 1, xref: "x", yref: "paper", text: "θ now", showarrow: false, yanchor: "bottom", xanchor: "left", font: { size: 10, color: COLOURS.current } }]
    };
    if (chosenRight === null || chosenRight === undefined) { layout.yaxis2.title.text = rightName + ": none observed"; }
    window.Plotly.newPlot(el, traces, layout, { displayModeBar: false, responsive: true });
  }

  document.querySelectorAll("[data-chart]").forEach(function (el) {
    var cell = cells[parseInt(el.dataset.chart, 10)];
    if (cell) { draw(el, cell); }
  });
})();
