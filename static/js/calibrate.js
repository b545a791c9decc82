// The calibration page: one Plotly chart per calibrated cell (Plotly served locally), θ along
// the bottom; α and the cloud share in % on the left axis; on the right the predicted P95
// against the cell's budget, or for a cost target the cost per hour against the ceiling; the
// predicted device quality where the cell has reports (issue #15). Under each, the cell's
// curve score → draft kept by decile, with Wilson intervals.
// The chosen θ is a marked vertical line, the current θ a dashed one. The figures are in the
// page's tables too: without JavaScript nothing but the charts is lost.
(function () {
  "use strict";

  var chartsNode = document.getElementById("calibration-charts");
  var targetNode = document.getElementById("calibration-target");
  var FONT = { family: "system-ui, -apple-system, 'Segoe UI', Roboto, 'Liberation Sans', sans-serif", size: 12, color: "#1c2430" };
  var COLOURS = { alpha: "#2f9e5b", cloud: "#2f6fd6", right: "#b45309", chosen: "#1c2430", current: "#6b7685", quality: "#8a55c9" };

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
    // Predicted device quality (%) where the cell has the reports for it, with its interval as
    // a band; for a quality target, its floor as a dashed line.
    var quality = cell.curve.map(function (p) { return p.device_quality; });
    if (quality.some(function (v) { return v !== null && v !== undefined; })) {
      traces.push({ x: thetas, y: pct(cell.curve.map(function (p) { return p.device_quality_high; })), mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false, connectgaps: false });
      traces.push({ x: thetas, y: pct(cell.curve.map(function (p) { return p.device_quality_low; })), mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: "rgba(138,85,201,0.15)", hoverinfo: "skip", showlegend: false });
      traces.push({ x: thetas, y: pct(quality), name: "device quality %", mode: "lines", line: { color: COLOURS.quality, width: 2 }, hovertemplate: "θ %{x:.2f}: quality %{y:.1f}%<extra></extra>" });
      if (target.kind === "quality") {
        traces.push({ x: [0, 1], y: [target.value * 100, target.value * 100], mode: "lines", hoverinfo: "skip", name: "quality floor " + Math.round(target.value * 100) + "%", line: { color: COLOURS.quality, width: 1, dash: "dash" } });
      }
    }
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

  // Score → draft kept per decile: the share kept with its Wilson interval, the reports per
  // bin as bars on the right axis.
  function drawKept(el, cell) {
    var bins = cell.kept || [];
    var mid = bins.map(function (b) { return (b.score_from + b.score_to) / 2; });
    var rate = bins.map(function (b) { return b.kept_rate * 100; });
    var traces = [
      { x: mid, y: bins.map(function (b) { return b.reported; }), type: "bar", name: "reports", yaxis: "y2", width: 0.08, marker: { color: "rgba(107,118,133,0.25)" }, hovertemplate: "score %{x:.2f}: %{y:,} reports<extra></extra>" },
      { x: mid, y: rate, name: "draft kept %", mode: "lines+markers", line: { color: COLOURS.quality, width: 2 }, marker: { size: 6 },
        error_y: { type: "data", symmetric: false, array: bins.map(function (b) { return (b.high - b.kept_rate) * 100; }), arrayminus: bins.map(function (b) { return (b.kept_rate - b.low) * 100; }), color: COLOURS.quality, thickness: 1, width: 3 },
        hovertemplate: "score %{x:.2f}: kept %{y:.1f}%<extra></extra>" }
    ];
    var layout = {
      font: FONT, margin: { l: 44, r: 52, t: 10, b: 56 }, height: 220,
      paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff", showlegend: true,
      legend: { orientation: "h", x: 0, y: -0.35, font: { size: 11 } },
      xaxis: { title: { text: "score", standoff: 4 }, range: [0, 1], dtick: el.clientWidth < 500 ? 0.2 : 0.1, gridcolor: "#eef1f5", zeroline: false },
      yaxis: { title: { text: "kept %", standoff: 2 }, range: [0, 100], gridcolor: "#eef1f5", zeroline: false },
      yaxis2: { title: { text: "reports", standoff: 2 }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false, zeroline: false }
    };
    window.Plotly.newPlot(el, traces, layout, { displayModeBar: false, responsive: true });
  }

  document.querySelectorAll("[data-chart]").forEach(function (el) {
    var cell = cells[parseInt(el.dataset.chart, 10)];
    if (cell) { draw(el, cell); }
  });
  document.querySelectorAll("[data-kept-chart]").forEach(function (el) {
    var cell = cells[parseInt(el.dataset.keptChart, 10)];
    if (cell && cell.kept && cell.kept.length) { drawKept(el, cell); }
  });
})();
