// The fleet dashboard: draws the payload of GET /api/v1/fleets/<slug>/dashboard with Plotly
// (served locally) and follows the live feed /ws/ui/fleets/<slug>/dashboard/: it subscribes to
// the view it shows and redraws in place when the server pushes a newer payload. Changing the
// window or a filter re-subscribes (with a snapshot) and updates the address bar; no reload.
// window.dashboardLive lets tests and people see what arrived (updates, computation ids).
(function () {
  "use strict";

  var config = document.getElementById("dashboard-config");
  var dataNode = document.getElementById("dashboard-data");
  if (!config || !dataNode) { return; }

  var ROUTE_COLOURS = { device: "#2f9e5b", cloud: "#2f6fd6", draft_refine: "#8a55c9" };
  var ROUTE_LABELS = { device: "device", cloud: "cloud", draft_refine: "draft-refine" };
  var PERCENTILE_DASH = { p50_ms: "dot", p95_ms: "solid", p99_ms: "dash" };
  var COHORT_COLOURS = { stable: "#1d7a3e", candidate: "#d9822b" };
  var MARKER_COLOURS = { published: "#6b7685", switched: "#2456c7", rollout: "#d9822b", rolled_back: "#b42318" };
  var FONT = { family: "system-ui, -apple-system, 'Segoe UI', Roboto, 'Liberation Sans', sans-serif", size: 12, color: "#1c2430" };
  var PLOT_CONFIG = { displayModeBar: false, responsive: true };
  var FINAL_CLOSE_CODES = { 4401: "signed out: reload to log in", 4403: "no access to this fleet", 4404: "this fleet no longer exists" };

  var live = window.dashboardLive = {
    updates: 0, renders: 0, errors: [], status: "connecting", subscribed: null,
    viewKey: null, computations: [], loadedAt: Date.now(), payload: null
  };

  var indicator = document.querySelector("[data-live-indicator]");
  var indicatorText = indicator && indicator.querySelector("[data-live-text]");
  var form = document.getElementById("dash-filters");
  var socket = null;
  var retries = 0;
  var current = JSON.parse(dataNode.textContent);

  function showStatus(status, text) {
    live.status = status;
    if (!indicator) { return; }
    indicator.dataset.status = status === "live" ? "live" : (status === "connecting" ? "static" : "offline");
    indicatorText.textContent = text;
  }

  // --- formatting -----------------------------------------------------------------------------

  function pct(value, digits) {
    if (value === null || value === undefined) { return "—"; }
    return (100 * value).toFixed(digits === undefined ? 1 : digits) + "%";
  }

  function ms(value) {
    if (value === null || value === undefined) { return "—"; }
    if (value >= 10000) { return (value / 1000).toFixed(1) + " s"; }
    return Math.round(value).toLocaleString("en-US") + " ms";
  }

  // An amount of the fleet's currency: $ for USD; 2 significant digits below 1, cents above.
  function money(value, currency) {
    if (value === null || value === undefined) { return "—"; }
    var text = value >= 1 ? value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })
      : value === 0 ? "0" : value.toPrecision(2);
    return currency === "USD" ? "$" + text : text + " " + currency;
  }

  function count(value) { return Number(value || 0).toLocaleString("en-US"); }

  function percents(list) {
    return list.map(function (v) { return v === null || v === undefined ? null : 100 * v; });
  }

  function setFigure(name, value, sub, tone) {
    var figure = document.querySelector('[data-figure="' + name + '"]');
    if (!figure) { return; }
    figure.querySelector("[data-value]").textContent = value;
    figure.querySelector("[data-sub]").textContent = sub || "";
    if (tone) { figure.dataset.tone = tone; } else { delete figure.dataset.tone; }
  }

  function setText(field, text) {
    document.querySelectorAll('[data-field="' + field + '"]').forEach(function (el) {
      if (el.textContent !== text) { el.textContent = text; }
    });
  }

  // --- layout helpers -------------------------------------------------------------------------

  function baseLayout(yTitle, extra) {
    var layout = {
      font: FONT,
      margin: { l: 62, r: 16, t: 10, b: 42 },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "#ffffff",
      hovermode: "x unified",
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: { size: 11 } },
      xaxis: { title: { text: "time (UTC)", standoff: 6 }, type: "date", automargin: true, gridcolor: "#eef1f5", linecolor: "#c3cad6" },
      yaxis: { title: { text: yTitle }, gridcolor: "#eef1f5", zerolinecolor: "#c3cad6", rangemode: "tozero" }
    };
    Object.keys(extra || {}).forEach(function (key) { layout[key] = extra[key]; });
    return layout;
  }

  // The drawn time axis: from the window's start, or later for a young fleet (the selector's
  // `shown_from`: a fleet five minutes old is not drawn as an hour, 90% of it empty).
  function timeRange(payload) {
    var step = payload.window.bucket_seconds * 1000;
    var first = new Date(payload.window.shown_from || payload.buckets[0]).getTime();
    var last = new Date(payload.buckets[payload.buckets.length - 1]).getTime() + step;
    return [new Date(first).toISOString(), new Date(last).toISOString()];
  }

  // The bucket still in progress (the last) holds part of a bucket's events: drawn as a whole
  // bucket its events read as a drop toward zero and its rates, over a handful of events, as a
  // spike. The charts leave it out (and shade where it is); the headline figures count it.
  // A fleet younger than a bucket has nothing else to show: its bucket in progress stays drawn
  // (shaded as such) rather than empty charts.
  function withoutPartial(payload) {
    var index = payload.window.partial_bucket;
    if (index === undefined || index === null) { return payload; }
    var length = payload.buckets.length;
    var whole = payload.series.events.some(function (n, i) { return i !== index && n > 0; });
    if (!whole) { return payload; }
    function cut(series) {
      var out = {};
      Object.keys(series).forEach(function (name) {
        var list = series[name];
        out[name] = Array.isArray(list) && list.length === length
          ? list.map(function (value, i) { return i === index ? null : value; }) : list;
      });
      return out;
    }
    var routes = {};
    Object.keys(payload.routes).forEach(function (route) { routes[route] = cut(payload.routes[route]); });
    var cohorts = {};
    Object.keys(payload.cohorts).forEach(function (cohort) {
      cohorts[cohort] = Object.assign({}, payload.cohorts[cohort], { series: cut(payload.cohorts[cohort].series) });
    });
    return Object.assign({}, payload, { series: cut(payload.series), routes: routes, cohorts: cohorts });
  }

  // A light band over the bucket in progress (not drawn until it ends).
  function partialBand(payload) {
    if (!payload.window.partial_from) { return []; }
    var from = new Date(payload.window.partial_from).getTime();
    var to = from + payload.window.bucket_seconds * 1000;
    return [{ type: "rect", xref: "x", yref: "paper", x0: payload.window.partial_from, x1: new Date(to).toISOString(),
              y0: 0, y1: 1, fillcolor: "rgba(107,118,133,0.12)", line: { width: 0 }, layer: "below", name: "partial" }];
  }

  // A phone's chart: fewer and shorter labels.
  function isNarrow(id) {
    var el = document.getElementById(id);
    return Boolean(el && el.clientWidth && el.clientWidth < 520);
  }

  // The width in pixels of a chart's plot area (its box less the layout's side margins).
  function plotWidth(id, margin) {
    var el = document.getElementById(id);
    var width = el && el.clientWidth ? el.clientWidth : 800;
    return Math.max(100, width - margin.l - margin.r);
  }

  // About how wide a label is at `size` px (Plotly measures only once it has drawn).
  function textWidth(text, size) { return 0.58 * size * String(text).length + 8; }

  // Vertical lines and labels for publishes, switches and rollout stages. Markers within one
  // bucket share one label ("v2 published · 5%"); labels that would touch go on a lower row,
  // so each reads on its own rather than as "v1 pu5%hed".
  function markerShapes(payload, id, margin) {
    var shapes = [];
    var annotations = [];
    var range = timeRange(payload);
    var t0 = new Date(range[0]).getTime();
    var span = Math.max(1, new Date(range[1]).getTime() - t0);
    var width = plotWidth(id, margin);
    var step = payload.window.bucket_seconds * 1000;
    var groups = [];
    payload.markers.forEach(function (marker) {
      var at = new Date(marker.at).getTime();
      if (at < t0) { return; }
      var colour = MARKER_COLOURS[marker.kind] || "#6b7685";
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: marker.at, x1: marker.at, y0: 0, y1: 1,
                    line: { color: colour, width: 1.5, dash: marker.kind === "published" ? "dot" : "solid" } });
      var last = groups[groups.length - 1];
      if (last && Math.floor(at / step) === Math.floor(last.at / step)) {
        last.labels.push(marker.label);
        last.summaries.push(marker.summary);
        last.colour = colour;
      } else {
        groups.push({ at: at, iso: marker.at, labels: [marker.label], summaries: [marker.summary], colour: colour });
      }
    });
    // Each label starts just right of its line, or ends just left of it near the right edge,
    // and is pushed inside the plot when even that would cut it (a line near the left edge of
    // a phone's narrow chart); labels that would touch go on a lower row.
    // A label too long for a phone's chart puts each marker on a line of its own.
    var rowsEnd = [];
    var lines = 1;
    groups.forEach(function (group) {
      group.stacked = textWidth(group.labels.join(" · "), 10) > width / 2;
      if (group.stacked) { lines = Math.max(lines, group.labels.length); }
    });
    groups.forEach(function (group) {
      var text = group.labels.join(group.stacked ? "<br>" : " · ");
      var px = width * (group.at - t0) / span;
      var w = group.stacked ? Math.max.apply(null, group.labels.map(function (l) { return textWidth(l, 10); })) : textWidth(text, 10);
      var left = px + 3 + w > width ? px - 3 - w : px + 3;
      left = Math.max(0, Math.min(left, width - w));
      var row = 0;
      while (rowsEnd[row] !== undefined && rowsEnd[row] > left - 4) { row += 1; }
      rowsEnd[row] = left + w;
      annotations.push({ x: left / width, xref: "paper", yref: "paper", y: 1, yanchor: "top", yshift: -2 - (2 + 13 * lines) * row,
                         xanchor: "left",
                         text: text, showarrow: false, font: { size: 10, color: group.colour },
                         bgcolor: "rgba(255,255,255,0.9)", hovertext: group.summaries.join("<br>"),
                         name: "marker" });
    });
    return { shapes: shapes, annotations: annotations };
  }

  // Ticks of a log axis in ms that read as numbers: 1-2-5 steps (or decades when there are
  // many), written "200 ms", "1 s", never Plotly's bare "2, 5, 1000, 2, 5".
  function logTicks(low, high) {
    function within(factors) {
      var values = [];
      for (var k = Math.floor(Math.log10(low)); k <= Math.ceil(Math.log10(high)); k += 1) {
        factors.forEach(function (f) {
          var v = f * Math.pow(10, k);
          if (v >= low && v <= high) { values.push(v); }
        });
      }
      return values;
    }
    var values = within([1, 2, 5]);
    if (values.length > 10) { values = within([1, 3]); }
    if (values.length > 10) { values = within([1]); }
    if (values.length < 2) { values = within([1, 2, 5]); }
    return { tickvals: values, ticktext: values.map(function (v) {
      if (v >= 1000) { return (v / 1000).toLocaleString("en-US") + " s"; }
      return v.toLocaleString("en-US") + " ms";
    }) };
  }

  function draw(id, traces, layout) {
    var el = document.getElementById(id);
    if (!el || !window.Plotly) { return; }
    window.Plotly.react(el, traces, layout, PLOT_CONFIG);
    el.dataset.points = String(traces.reduce(function (n, t) {
      var values = t.z ? [].concat.apply([], t.z) : (t.y || []);
      return n + values.filter(function (v) { return v !== null && v !== undefined; }).length;
    }, 0));
  }

  // --- charts ---------------------------------------------------------------------------------

  function drawShares(payload, x) {
    var series = payload.series;
    // Only buckets with events: an empty minute is not "0% on the device", and a stretch with
    // none is a gap, not a slope from the bucket before it to the one after. Each run of
    // buckets with events is its own stack (a stack would fill a gap with 0 or a slope).
    var runs = [];
    var run = null;
    series.events.forEach(function (n, i) {
      if (n > 0) {
        if (!run) { run = []; runs.push(run); }
        run.push(i);
      } else {
        run = null;
      }
    });
    var shares = [
      { name: "α on device", y: percents(series.alpha), fillcolor: "rgba(47,158,91,0.55)", line: { color: ROUTE_COLOURS.device } },
      { name: "draft-refine", y: percents(series.draft_refine_share), fillcolor: "rgba(138,85,201,0.5)", line: { color: ROUTE_COLOURS.draft_refine } },
      { name: "cloud", y: percents(series.cloud_share), fillcolor: "rgba(47,111,214,0.5)", line: { color: ROUTE_COLOURS.cloud } }
    ];
    var traces = [];
    runs.forEach(function (indexes, k) {
      shares.forEach(function (share) {
        // A run of a bucket or two: markers, or a lone bucket draws nothing at all.
        traces.push(Object.assign({ type: "scatter", mode: indexes.length < 3 ? "lines+markers" : "lines",
                                    stackgroup: "share-" + k, legendgroup: share.name, showlegend: k === 0,
                                    marker: { size: 7 }, hovertemplate: "%{y:.1f}%" },
                                  share, { x: indexes.map(function (i) { return x[i]; }),
                                           y: indexes.map(function (i) { return share.y[i]; }) }));
      });
    });
    traces.push({ x: x, y: series.events, name: "events", type: "scatter", mode: "lines+markers", yaxis: "y2",
                  connectgaps: false, marker: { size: 3 },
                  line: { color: "#4a5568", width: 1, dash: "dot" }, hovertemplate: "%{y:,} events" });
    var margin = { l: 62, r: 62, t: 10, b: 42 };
    var marks = markerShapes(payload, "chart-shares", margin);
    draw("chart-shares", traces, baseLayout("share of events (%)", {
      yaxis: { title: { text: "share of events (%)" }, range: [0, 100], ticksuffix: "%", gridcolor: "#eef1f5" },
      yaxis2: { title: { text: payload.captions.events_axis }, overlaying: "y", side: "right", rangemode: "tozero",
                showgrid: false, tickmode: "auto", nticks: 5, tickformat: ",d" },
      xaxis: { title: { text: "time (UTC)", standoff: 6 }, type: "date", automargin: true, range: timeRange(payload), gridcolor: "#eef1f5" },
      margin: margin,
      shapes: partialBand(payload).concat(marks.shapes), annotations: marks.annotations
    }));
  }

  function drawLatency(payload, x) {
    // One legend entry per route (its P95); P50 and P99 follow it in the same colour, dotted
    // and dashed, as the subtitle says.
    var traces = [];
    ["device", "cloud", "draft_refine"].forEach(function (route) {
      var figures = payload.routes[route];
      if (!figures || !figures.events) { return; }
      ["p95_ms", "p50_ms", "p99_ms"].forEach(function (name) {
        var p95 = name === "p95_ms";
        traces.push({ x: x, y: figures[name], type: "scatter", mode: p95 ? "lines+markers" : "lines", marker: { size: 4 },
                      name: ROUTE_LABELS[route] + " " + name.replace("_ms", "").toUpperCase(),
                      legendgroup: route, showlegend: p95,
                      line: { color: ROUTE_COLOURS[route], dash: PERCENTILE_DASH[name], width: p95 ? 2.2 : 1.2 },
                      hovertemplate: "%{y:,.0f} ms" });
      });
    });
    var range = timeRange(payload);
    var values = [];
    traces.forEach(function (t) { t.y.forEach(function (v) { if (v) { values.push(v); } }); });
    var budgetsMs = payload.budgets.map(function (b) { return b.budget_ms; });
    // Every budget is drawn (a log axis has room for them), with the data in between.
    var all = values.concat(budgetsMs);
    var low = all.length ? Math.max(1, Math.min.apply(null, all) / 1.5) : 10;
    var high = all.length ? Math.max.apply(null, all) * 1.4 : 1000;
    var lo = Math.log10(low);
    var hi = Math.log10(high);
    // The bottom margin holds the two-line date ticks and the axis title, so the plot's height
    // (which places the budget labels) is what Plotly draws, not less after its automargin.
    var margin = { l: 70, r: 16, t: 10, b: 64 };
    var el = document.getElementById("chart-latency");
    var plotHeight = Math.max(80, (el && el.clientHeight ? el.clientHeight : 300) - margin.t - margin.b);
    // On a phone the labels say the milliseconds only, so the two columns stay apart.
    var narrow = isNarrow("chart-latency");
    // Budgets of the same milliseconds share a line and a label.
    var byMs = {};
    payload.budgets.forEach(function (budget) {
      var entry = byMs[budget.budget_ms] = byMs[budget.budget_ms] || { ms: budget.budget_ms, names: [] };
      var tasks = (budget.task_types || []).join("/");
      entry.names.push(budget.latency_budget + (tasks ? " " + tasks : ""));
    });
    var lines = Object.keys(byMs).map(function (key) { return byMs[key]; })
      .sort(function (a, b) { return a.ms - b.ms; });
    // Labels sit at the left or right edge beside their line: each goes to the side where it
    // needs the least push to clear the label below it (15 px a line), so none overlap.
    var LABEL_PX = 15;
    var previous = [-Infinity, -Infinity];
    var shapes = [];
    var annotations = [];
    lines.forEach(function (line) {
      var px = plotHeight * (Math.log10(line.ms) - lo) / (hi - lo);
      var side = Math.max(px, previous[0] + LABEL_PX) - px <= Math.max(px, previous[1] + LABEL_PX) - px ? 0 : 1;
      var placed = Math.max(px, previous[side] + LABEL_PX);
      previous[side] = placed;
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: line.ms, y1: line.ms,
                    line: { color: "#b42318", width: 1.1, dash: "dash" } });
      annotations.push({ xref: "paper", x: side ? 0.995 : 0.005, xanchor: side ? "right" : "left",
                         y: Math.log10(line.ms), yanchor: "bottom",
                         yshift: placed - px,
                         text: narrow ? "budget " + count(line.ms) + " ms" : "budget " + count(line.ms) + " ms · " + line.names.join(", "),
                         showarrow: false, font: { size: 10, color: "#b42318" }, bgcolor: "rgba(255,255,255,0.85)",
                         name: "budget" });
    });
    var ticks = logTicks(low, high);
    draw("chart-latency", traces, baseLayout("latency (log scale)", {
      yaxis: { title: { text: "latency (log scale)" }, type: "log", gridcolor: "#eef1f5", range: [lo, hi],
               tickmode: "array", tickvals: ticks.tickvals, ticktext: ticks.ticktext },
      xaxis: { title: { text: "time (UTC)", standoff: 6 }, type: "date", automargin: true, range: range, gridcolor: "#eef1f5" },
      margin: margin, shapes: partialBand(payload).concat(shapes), annotations: annotations
    }));
  }

  function drawRates(payload, x) {
    var series = payload.series;
    var lines = [
      ["fallback cloud→device", series.fallback_cloud_to_device, "#d9822b", "solid"],
      ["fallback device→cloud", series.fallback_device_to_cloud, "#b5651d", "dot"],
      ["cache hits", series.cache_hit_rate, "#2f9e5b", "solid"],
      ["errors", series.error_rate, "#b42318", "solid"]
    ];
    var traces = lines.map(function (line) {
      return { x: x, y: percents(line[1]), name: line[0], type: "scatter", mode: "lines+markers", marker: { size: 4 },
               line: { color: line[2], dash: line[3] }, hovertemplate: "%{y:.2f}%" };
    });
    draw("chart-rates", traces, baseLayout("% of events", {
      yaxis: { title: { text: "% of events" }, ticksuffix: "%", rangemode: "tozero", gridcolor: "#eef1f5" },
      xaxis: { title: { text: "time (UTC)", standoff: 6 }, type: "date", automargin: true, range: timeRange(payload), gridcolor: "#eef1f5" },
      shapes: partialBand(payload)
    }));
  }

  function drawPrivacy(payload, x) {
    var values = payload.series.privacy_violations;
    var any = values.some(function (v) { return v > 0; });
    draw("chart-privacy", [{ x: x, y: values, type: "bar", name: "privacy violations",
                              marker: { color: any ? "#b42318" : "#8fd0a6" }, hovertemplate: "%{y} violations" }],
         baseLayout("violations (events)", {
           yaxis: { title: { text: "violations (events)" }, rangemode: "tozero", range: any ? null : [0, 1], dtick: any ? null : 1, gridcolor: "#eef1f5" },
           xaxis: { title: { text: "time (UTC)", standoff: 6 }, type: "date", automargin: true, range: timeRange(payload), gridcolor: "#eef1f5" },
           showlegend: false, shapes: partialBand(payload),
           annotations: any ? [] : [{ xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
                                      text: "none in this window", font: { size: 13, color: "#1d7a3e" } }]
         }));
  }

  function gridAxes(grid) {
    var columns = [];
    grid.latency_budgets.forEach(function (budget) {
      grid.privacy_tiers.forEach(function (tier) { columns.push([budget, tier]); });
    });
    var index = {};
    grid.cells.forEach(function (cell) {
      index[cell.task_type + "|" + cell.latency_budget + "|" + cell.privacy_tier] = cell;
    });
    return { columns: columns, rows: grid.task_types, index: index };
  }

  function drawGrid(payload) {
    var axes = gridAxes(payload.grid);
    // On a phone the grid is transposed: the few short task types across, each latency budget
    // · privacy tier down (four labels like "interactive / normal" side by side run together
    // in a chart 350 px wide), the colour scale under the chart rather than beside it.
    var narrow = isNarrow("chart-grid-cloud");
    var columnLabels = axes.columns.map(function (c) { return c[0] + "<br>" + c[1]; });
    var across = narrow ? axes.rows : columnLabels;
    var down = narrow ? columnLabels : axes.rows;
    function matrix(pick) {
      var rows = axes.rows.map(function (task) {
        return axes.columns.map(function (c) { return pick(axes.index[task + "|" + c[0] + "|" + c[1]]); });
      });
      if (!narrow) { return rows; }
      return axes.columns.map(function (_, j) { return rows.map(function (row) { return row[j]; }); });
    }
    function scale(bar) {
      if (!narrow) { return bar; }
      return Object.assign({}, bar, { orientation: "h", x: 0.5, xanchor: "center", y: -0.2, yanchor: "top",
                                      thickness: 10, len: 1, title: Object.assign({}, bar.title, { side: "top" }) });
    }
    var TEXT = { size: narrow ? 11 : 12 };
    var where = narrow ? "%{x} · %{y}" : "%{y} · %{x}";
    var cloud = matrix(function (cell) { return cell && cell.events ? 100 * cell.cloud_share : null; });
    var cloudText = matrix(function (cell) {
      if (!cell) { return ""; }
      return cell.events ? (100 * cell.cloud_share).toFixed(0) + "%<br>" + count(cell.events) + " ev" : "no events";
    });
    var p95 = matrix(function (cell) { return cell && cell.events ? cell.p95_ms : null; });
    // Two short lines a cell: the P95 over the cell's budget ("420 ms" / "of 1 s").
    function seconds(value) {
      return value >= 1000 ? (value / 1000).toLocaleString("en-US", { maximumFractionDigits: 1 }) + " s" : count(value) + " ms";
    }
    var p95Text = matrix(function (cell) {
      if (!cell) { return ""; }
      var budget = cell.budget_ms ? seconds(cell.budget_ms) : "";
      return cell.events ? ms(cell.p95_ms) + (budget ? "<br>of " + budget : "") : "no events" + (budget ? "<br>budget " + budget : "");
    });
    var overBudget = matrix(function (cell) {
      return cell && cell.events && cell.budget_ms ? cell.p95_ms / cell.budget_ms : null;
    });
    var layout = {
      font: FONT, margin: narrow ? { l: 8, r: 8, t: 8, b: 70 } : { l: 86, r: 16, t: 8, b: 78 }, paper_bgcolor: "rgba(0,0,0,0)",
      xaxis: { title: { text: narrow ? "task type" : "latency budget · privacy tier" }, tickangle: 0, automargin: true, side: narrow ? "top" : "bottom" },
      yaxis: { title: { text: narrow ? "budget · privacy" : "task type" }, automargin: true, autorange: narrow ? "reversed" : true }
    };
    draw("chart-grid-cloud", [{
      type: "heatmap", x: across, y: down, textfont: TEXT, z: cloud, text: cloudText, texttemplate: "%{text}",
      zmin: 0, zmax: 100, colorscale: [[0, "#e3f4e8"], [0.5, "#98b5ee"], [1, "#1f4fb0"]],
      colorbar: scale({ title: { text: "cloud %" }, ticksuffix: "%" }), hovertemplate: where + "<br>cloud %{z:.1f}%<extra></extra>",
      xgap: 2, ygap: 2
    }], layout);
    // Device quality per cell: a cell whose events reported nothing is "no reports", never
    // a 0% (or 0) that would read as "the cloud rewrote every draft".
    var kept = matrix(function (cell) { return cell && cell.refine_reported ? 100 * cell.draft_kept_rate : null; });
    var keptText = matrix(function (cell) {
      if (!cell) { return ""; }
      return cell.refine_reported ? (100 * cell.draft_kept_rate).toFixed(0) + "%<br>" + count(cell.refine_reported) + " rep" : "no reports";
    });
    // Hover: of those, the device answers refined in the background (the device's own quality).
    var keptDevice = matrix(function (cell) {
      if (!cell || !cell.device_refine_reported) { return "no shadow refines"; }
      return "on device " + (100 * cell.device_kept_rate).toFixed(0) + "% of " + count(cell.device_refine_reported);
    });
    var quality = matrix(function (cell) { return cell && cell.quality_count ? cell.mean_quality : null; });
    var qualityText = matrix(function (cell) {
      if (!cell) { return ""; }
      return cell.quality_count ? cell.mean_quality.toFixed(2) + "<br>" + count(cell.quality_count) + " rep" : "no reports";
    });
    var qualityScale = [[0, "#b42318"], [0.5, "#f6c27a"], [0.75, "#fff3d6"], [1, "#2f9e5b"]];
    // A grid with no report in any cell draws no heatmap at all: it says so instead.
    function reportedLayout(values) {
      var any = values.some(function (row) { return row.some(function (v) { return v !== null; }); });
      if (any) { return layout; }
      return Object.assign({}, layout, {
        xaxis: Object.assign({}, layout.xaxis, { type: "category", categoryarray: across, range: [-0.5, across.length - 0.5] }),
        yaxis: Object.assign({}, layout.yaxis, { type: "category", categoryarray: down, autorange: false,
                                                 range: narrow ? [down.length - 0.5, -0.5] : [-0.5, down.length - 0.5] }),
        annotations: [{ xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
                        text: "no reports in this view", font: { size: 13, color: "#6b7685" } }]
      });
    }
    draw("chart-grid-kept", [{
      type: "heatmap", x: across, y: down, textfont: TEXT, z: kept, text: keptText, texttemplate: "%{text}",
      customdata: keptDevice, zmin: 0, zmax: 100, colorscale: qualityScale,
      colorbar: scale({ title: { text: "kept %" }, ticksuffix: "%" }), hovertemplate: where + "<br>draft kept %{z:.1f}%<br>%{customdata}<extra></extra>",
      xgap: 2, ygap: 2
    }], reportedLayout(kept));
    draw("chart-grid-quality", [{
      type: "heatmap", x: across, y: down, textfont: TEXT, z: quality, text: qualityText, texttemplate: "%{text}",
      zmin: 0, zmax: 1, colorscale: qualityScale,
      colorbar: scale({ title: { text: "quality" } }), hovertemplate: where + "<br>app quality %{z:.2f}<extra></extra>",
      xgap: 2, ygap: 2
    }], reportedLayout(quality));
    draw("chart-grid-p95", [{
      type: "heatmap", x: across, y: down, textfont: TEXT, z: overBudget, text: p95Text, texttemplate: "%{text}",
      customdata: p95, zmin: 0, zmax: 2, colorscale: [[0, "#e3f4e8"], [0.45, "#fff3d6"], [0.5, "#f6c27a"], [1, "#b42318"]],
      colorbar: scale({ title: { text: "P95 ÷ budget" }, tickvals: [0, 0.5, 1, 1.5, 2], ticktext: ["0", "½", "1 (at budget)", "1½", "≥2"] }),
      hovertemplate: where + "<br>P95 %{customdata:,.0f} ms (%{z:.2f}× budget)<extra></extra>", xgap: 2, ygap: 2
    }], layout);
  }

  function drawCohorts(payload, x) {
    var card = document.querySelector("[data-cohorts-card]");
    var candidate = payload.cohorts.candidate;
    var showing = Boolean(payload.rollout) || candidate.summary.events > 0;
    card.hidden = !showing;
    if (!showing) { return; }
    var stable = payload.cohorts.stable;
    var compared = payload.compared_rollout || payload.rollout;
    var note = "candidate events in this window";
    if (compared) {
      var how = compared.open ? compared.stage + "%" : compared.state.replace("_", " ") + " at " + compared.stage + "%";
      note = "v" + compared.candidate + " (candidate, " + how + ") against v" + compared.stable + " (stable)";
    }
    setText("cohorts-note", note);
    var charts = [
      ["chart-cohort-alpha", "alpha", "α on device (%)", true],
      ["chart-cohort-cloud", "cloud_share", "cloud share (%)", true],
      ["chart-cohort-fallback", "fallback_rate", "fallback rate (%)", true],
      ["chart-cohort-p95", "p95_ms", "P95 latency (ms)", false]
    ];
    charts.forEach(function (chart) {
      var traces = ["stable", "candidate"].map(function (cohort) {
        var values = payload.cohorts[cohort].series[chart[1]];
        return { x: x, y: chart[3] ? percents(values) : values, type: "scatter", mode: "lines+markers", marker: { size: 4 },
                 name: payload.cohorts[cohort].label || cohort, line: { color: COHORT_COLOURS[cohort], width: 2 },
                 hovertemplate: chart[3] ? "%{y:.1f}%" : "%{y:,.0f} ms" };
      });
      draw(chart[0], traces, baseLayout(chart[2], {
        margin: { l: 54, r: 8, t: 24, b: 40 },
        legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom", font: { size: 10 } },
        xaxis: { title: { text: "time (UTC)", standoff: 4 }, type: "date", automargin: true, range: timeRange(payload), gridcolor: "#eef1f5", nticks: 4 },
        shapes: partialBand(payload)
      }));
    });
    return stable;
  }

  // Draft kept and app quality over time, one line per cohort (the candidate's only when it
  // has events); a chart with no report at all says so instead of drawing an empty axis.
  function drawQuality(payload, x) {
    var charts = [
      ["chart-quality-kept", "draft_kept_rate", "refine_reported", "draft kept (%)", true],
      ["chart-quality-app", "mean_quality", "quality_count", "app quality (0–1)", false]
    ];
    charts.forEach(function (chart) {
      var any = false;
      var traces = ["stable", "candidate"].filter(function (cohort) {
        return cohort === "stable" || payload.cohorts[cohort].summary.events > 0;
      }).map(function (cohort) {
        var series = payload.cohorts[cohort].series;
        var values = series[chart[1]] || [];
        var reports = series[chart[2]] || [];
        if (values.some(function (v) { return v !== null && v !== undefined; })) { any = true; }
        return { x: x, y: chart[4] ? percents(values) : values, customdata: reports, type: "scatter", mode: "lines+markers",
                 marker: { size: 4 }, name: payload.cohorts[cohort].label || cohort,
                 line: { color: COHORT_COLOURS[cohort], width: 2 },
                 hovertemplate: (chart[4] ? "%{y:.1f}%" : "%{y:.2f}") + " (%{customdata:,} reports)" };
      });
      draw(chart[0], traces, baseLayout(chart[3], {
        margin: { l: 54, r: 8, t: 24, b: 40 },
        legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom", font: { size: 10 } },
        yaxis: { title: { text: chart[3] }, range: chart[4] ? [0, 100] : [0, 1], ticksuffix: chart[4] ? "%" : "", gridcolor: "#eef1f5" },
        xaxis: { title: { text: "time (UTC)", standoff: 4 }, type: "date", automargin: true, range: timeRange(payload), gridcolor: "#eef1f5", nticks: 6 },
        shapes: partialBand(payload),
        annotations: any ? [] : [{ xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
                                   text: "no reports in this window", font: { size: 13, color: "#6b7685" } }]
      }));
    });
  }

  function drawConvergence(payload) {
    var conv = payload.convergence;
    // With a segment filter the figures are of the devices its rule matches now, not the fleet.
    var segment = conv.segment;
    setText("convergence-title", segment ? "Convergence of segment " + segment : "Fleet convergence");
    setText("convergence-note", count(conv.devices) + (segment ? " devices in the segment now (by their attributes), " : " devices, ") +
            count(conv.online) + " online now");
    var labels = conv.versions.map(function (row) { return "v" + row.version + " (" + row.role.replace("other", "not assigned") + ")"; });
    var traces = [
      ["assigned", "assigned", "#c3cad6"],
      ["acked", "acked (runs it)", "#2f6fd6"],
      ["online", "acked and online now", "#2f9e5b"]
    ].map(function (spec) {
      return { type: "bar", orientation: "h", y: labels, x: conv.versions.map(function (row) { return row[spec[0]]; }),
               name: spec[1], marker: { color: spec[2] }, hovertemplate: "%{x:,} devices<extra>" + spec[1] + "</extra>" };
    });
    draw("chart-convergence", traces, {
      font: FONT, barmode: "group", margin: { l: 150, r: 16, t: 6, b: 40 }, paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "#ffffff", legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      // Whole devices: a small fleet's axis steps by one, never "0.5 devices".
      xaxis: { title: { text: "devices" }, rangemode: "tozero", gridcolor: "#eef1f5", tickformat: ",d",
               dtick: conv.devices <= 10 ? 1 : null },
      yaxis: { automargin: true, autorange: "reversed" }
    });
  }

  function drawFigures(payload) {
    var s = payload.summary;
    var events = count(s.events) + " events in " + payload.view.window;
    setFigure("alpha", pct(s.alpha), events);
    setFigure("cloud_share", pct(s.cloud_share), "draft-refine " + pct(s.draft_refine_share));
    var worstBudget = payload.budgets.length ? payload.budgets[0].budget_ms : null;
    var p95 = s.latency_ms.p95;
    setFigure("p95", ms(p95), "P50 " + ms(s.latency_ms.p50) + " · P99 " + ms(s.latency_ms.p99),
              p95 !== null && worstBudget !== null && p95 > payload.budgets[payload.budgets.length - 1].budget_ms ? "warn" : null);
    setFigure("fallback_rate", pct(s.fallback_rate, 2),
              "errors " + pct(s.error_rate, 2) + " · cache " + pct(s.cache_hit_rate));
    if (s.refine_reported) {
      var quality = s.quality_count ? "app quality " + s.mean_quality.toFixed(2) + " (" + count(s.quality_count) + ")" : "app quality: no reports";
      var onDevice = s.device_refine_reported ? " · on device " + pct(s.device_kept_rate, 0) : "";
      setFigure("quality", pct(s.draft_kept_rate), count(s.refine_reported) + " reports" + onDevice + " · " + quality);
    } else {
      setFigure("quality", "no reports", s.quality_count ? "app quality " + s.mean_quality.toFixed(2) + " (" + count(s.quality_count) + ")" : "no quality signal in this view", "none");
    }
    setFigure("privacy", count(s.privacy_violations), s.privacy_violations ? "must be 0: look now" : "should be 0",
              s.privacy_violations ? "bad" : "good");
    var cost = payload.cost;
    if (cost) {
      var saving = cost.saving_share === null ? "no task yet" : "saves " + pct(cost.saving_share, 0) + " vs all-cloud " + money(cost.all_cloud.per_day, cost.currency) + "/day";
      // Against stable only for the rollout in progress, past a minimum of tasks per cohort,
      // with its 95% interval; otherwise the API says why not (cost.cohorts_withheld).
      var cohorts = cost.cohorts;
      var versus;
      if (cohorts && cohorts.candidate_change !== null) {
        var signed = function (value) {
          var rounded = Math.round(value * 100);
          return (rounded >= 0 ? "+" : "−") + Math.abs(rounded) + "%";
        };
        var interval = cohorts.candidate_change_low === null ? "" :
          "95%: " + signed(cohorts.candidate_change_low) + " to " + signed(cohorts.candidate_change_high) + ", ";
        versus = "v" + cohorts.candidate_version + " " + signed(cohorts.candidate_change) + " per task vs stable v" +
          cohorts.stable_version + " (" + interval + "on " + count(cohorts.candidate_events) + " v" +
          cohorts.candidate_version + " tasks)";
      } else {
        versus = "vs stable: " + (cost.cohorts_withheld || "not compared");
      }
      // The rate per day is the cost over the span that holds data (first to last event).
      var span = !(cost.span && cost.span.text) ? "fewer than two events: no rate yet"
        : "from " + cost.span.text + " of data" + (cost.per_day === null ? ": under a minute, no rate yet" : "");
      // The label says "/ day"; the value stays short enough for the smallest card.
      setFigure("cost", money(cost.per_day, cost.currency), span + " · " + saving + " · " + versus);
    }
    if (payload.alerts !== null && payload.alerts !== undefined) {
      var firing = payload.alerts.firing || 0;
      setFigure("alerts", count(firing), payload.alerts.summary || "", firing ? "bad" : "good");
    }
  }

  function render(payload) {
    current = payload;
    live.payload = payload;
    live.renders += 1;
    var x = payload.buckets;
    var whole = withoutPartial(payload);
    drawFigures(payload);
    drawShares(whole, x);
    drawLatency(whole, x);
    drawRates(whole, x);
    drawPrivacy(whole, x);
    drawGrid(payload);
    drawCohorts(whole, x);
    drawQuality(whole, x);
    drawConvergence(payload);
    setText("stable", payload.stable_version ? "v" + payload.stable_version : "none yet");
    var rolloutEl = document.querySelector('[data-field="rollout"]');
    if (rolloutEl) {
      rolloutEl.hidden = !payload.rollout;
      if (payload.rollout) {
        setText("rollout-candidate", "v" + payload.rollout.candidate);
        setText("rollout-stage", payload.rollout.stage + "%");
        setText("rollout-state", payload.rollout.state === "active" ? "" : "(" + payload.rollout.state + ")");
      }
    }
    var generated = document.querySelector('[data-field="generated-at"]');
    if (generated) {
      generated.setAttribute("datetime", payload.generated_at);
      generated.textContent = payload.generated_at.slice(11, 19) + " UTC";
    }
    setText("window-note", payload.captions.window);
    setText("caption-shares", payload.captions.shares);
    setText("caption-partial", payload.captions.partial || "");
    refreshOptions(payload);
  }

  // Payloads arriving faster than the charts redraw: draw only the newest, once per frame.
  var pending = null;
  function renderSoon(payload) {
    var scheduled = pending !== null;
    pending = payload;
    if (scheduled) { return; }
    window.requestAnimationFrame(function () {
      var latest = pending;
      pending = null;
      render(latest);
    });
  }

  function refreshOptions(payload) {
    ["versions", "task_types"].forEach(function (name) {
      var select = form && form.querySelector('[data-options="' + name + '"]');
      if (!select) { return; }
      var have = {};
      Array.prototype.forEach.call(select.options, function (o) { have[o.value] = true; });
      payload.options[name].forEach(function (value) {
        var text = String(value);
        if (!have[text]) {
          var option = document.createElement("option");
          option.value = text;
          option.textContent = name === "versions" ? "v" + text : text;
          select.appendChild(option);
        }
      });
    });
  }

  // --- view (window and filters) --------------------------------------------------------------

  function viewFromForm() {
    var view = {};
    new FormData(form).forEach(function (value, key) { if (value !== "") { view[key] = value; } });
    return view;
  }

  function queryOf(view) {
    var params = new URLSearchParams();
    ["window", "version", "cohort", "task_type", "route", "segment"].forEach(function (key) {
      if (view[key] !== undefined && view[key] !== null && view[key] !== "") { params.set(key, view[key]); }
    });
    return params.toString();
  }

  function subscribe(view, snapshot) {
    if (!socket || socket.readyState !== WebSocket.OPEN) { return false; }
    var message = Object.assign({ type: "subscribe" }, view);
    if (snapshot) { message.snapshot = true; }
    socket.send(JSON.stringify(message));
    return true;
  }

  function fetchView(view) {
    return fetch(config.dataset.apiUrl + "?" + queryOf(view), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.json().then(function (body) { return { ok: response.ok, body: body }; }); })
      .then(function (result) {
        if (result.ok) { render(result.body); } else { live.errors.push(result.body.error); }
      });
  }

  if (form) {
    form.addEventListener("change", function () {
      var view = viewFromForm();
      history.replaceState(null, "", "?" + queryOf(view));
      if (!subscribe(view, true)) { fetchView(view); }
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      form.dispatchEvent(new Event("change"));
    });
  }

  // --- the live feed --------------------------------------------------------------------------

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + window.location.host + config.dataset.wsPath);
    showStatus("connecting", "connecting…");
    socket.addEventListener("open", function () {
      // After a reconnect, ask for a snapshot: updates may have been missed meanwhile. So too
      // when the form was changed before this script ran (the page shows another view).
      var again = retries > 0;
      var view = form ? viewFromForm() : current.view;
      retries = 0;
      subscribe(view, again || queryOf(view) !== current.view_key);
    });
    socket.addEventListener("message", function (event) {
      var message;
      try { message = JSON.parse(event.data); } catch (error) { return; }
      if (message.type === "subscribed") {
        live.subscribed = message.view;
        live.viewKey = message.view_key;
        showStatus("live", "live");
      } else if (message.type === "dashboard") {
        if (message.view_key !== live.viewKey) { return; }
        var payload = message.payload;
        if (current && current.view_key === payload.view_key && payload.generated_at < current.generated_at) { return; }
        live.updates += 1;
        if (payload.computation) { live.computations.push(payload.computation); }
        renderSoon(payload);
      } else if (message.type === "error") {
        live.errors.push(message);
      }
    });
    socket.addEventListener("close", function (event) {
      live.subscribed = null;
      if (FINAL_CLOSE_CODES[event.code]) {
        showStatus("offline", FINAL_CLOSE_CODES[event.code]);
        return;
      }
      retries += 1;
      var delay = Math.min(10000, 500 * Math.pow(2, Math.min(retries, 5))) * (0.5 + Math.random() / 2);
      showStatus("offline", "reconnecting…");
      window.setTimeout(connect, delay);
    });
  }

  function start() {
    render(current);
    if (window.WebSocket) { connect(); } else { showStatus("offline", "not live: no WebSocket"); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
