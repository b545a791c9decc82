// The policy lab's playground (/fleets/<slug>/lab/): every control asks the explain API
// (POST /api/v1/fleets/<slug>/lab/explain) again, debounced, and the answer is drawn as a trace.
// Nothing here decides: the route, the score, θ and the latency are the server's answer, which
// is edge_sdk.decision.decide, the function devices run.
(function () {
  "use strict";

  var DEBOUNCE_MS = 120;
  var STREAM_WINDOW = 50; // running α and latency over the last 50 tasks
  var STREAM_EVERY_MS = 700;
  var TERM_LABEL = { length: "length", intent: "intent doubt", lm: "model doubt" };
  var TERM_HINT = { length: "min(1, tokens / the cell's length norm)", intent: "1 − intent confidence", lm: "1 − on-device model confidence" };
  var ADJUST_LABEL = { network: "weak network", load: "device busy", cloud_pressure: "cloud pressure", clamp: "clamp to 0–1" };
  // Why a matrix cell routes as it does; by threshold, the comparison itself says it.
  var WHY = { policy: "mode", privacy: "privacy", offline: "offline", latency: "too slow", threshold: "" };

  var root = document.getElementById("lab");
  if (!root) { return; }
  var first = JSON.parse(document.getElementById("lab-first").textContent);
  var apiUrl = root.dataset.apiUrl;
  var csrf = root.dataset.csrf;
  var field = function (name, scope) { return (scope || document).querySelector('[data-field="' + name + '"]'); };
  var thetaSlider = root.querySelector('[data-control="threshold"]');
  var resetTheta = root.querySelector('[data-action="reset-threshold"]');
  var thetaTouched = false;
  var publishedTheta = first.cell.threshold;
  var pending = null;
  var sequence = 0;
  var shown = 0;
  var controller = null;
  var samples = first.samples || [];

  function fmt(value, digits) {
    if (value === null || value === undefined) { return "–"; }
    return Number(value).toFixed(digits === undefined ? 2 : digits);
  }
  function ms(value) {
    if (value === null || value === undefined) { return "never (no bandwidth)"; }
    return Math.round(value).toLocaleString("en") + " ms";
  }
  function signed(value) { return (value >= 0 ? "+" : "−") + Math.abs(value).toFixed(2); }
  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  // --- the request ------------------------------------------------------------------------
  function number(name) { return Number(root.querySelector('[name="' + name + '"]').value); }
  function checked(name) { var input = document.querySelector('input[name="' + name + '"]:checked'); return input ? input.value : ""; }

  function body() {
    var version = root.querySelector('[data-control="version"]').value;
    var override = {};
    var mode = checked("mode");
    if (mode) { override.mode = mode; }
    if (thetaTouched) { override.threshold = number("threshold"); }
    return {
      version: version === "draft" ? "draft" : Number(version),
      cell: {
        task_type: root.querySelector('[name="task_type"]').value,
        latency_budget: root.querySelector('[name="latency_budget"]').value,
        privacy_tier: root.querySelector('[name="privacy_tier"]').value
      },
      override: override,
      task: {
        tokens: Math.round(number("tokens")),
        intent_conf: number("intent_conf"),
        lm_conf: number("lm_conf"),
        upload_bytes: Math.round(number("upload_bytes"))
      },
      device: {
        rtt_ms: number("rtt_ms"),
        bandwidth_kbps: number("bandwidth_kbps"),
        device_load: number("device_load"),
        online: root.querySelector('[name="online"]').checked,
        cloud_pressure: number("cloud_pressure"),
        cloud_infer_ms: number("cloud_infer_ms")
      },
      matrix: true,
      samples: checked("samples") || "seed"
    };
  }

  function ask() {
    pending = null;
    var mine = ++sequence;
    if (controller) { controller.abort(); }
    controller = window.AbortController ? new AbortController() : null;
    root.classList.add("is-asking");
    fetch(apiUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(body()),
      signal: controller ? controller.signal : undefined
    })
      .then(function (response) {
        return response.json().then(function (data) { return { ok: response.ok, data: data }; });
      })
      .then(function (result) {
        if (mine < shown) { return; } // an older answer arriving late
        shown = mine;
        root.classList.remove("is-asking");
        if (!result.ok) {
          var error = result.data && result.data.error;
          field("status").textContent = "Not answered: " + (error ? error.message : "the server refused the request") + ".";
          return;
        }
        field("status").textContent = "";
        draw(result.data);
      })
      .catch(function (error) {
        if (error && error.name === "AbortError") { return; }
        root.classList.remove("is-asking");
        field("status").textContent = "Not answered: the server could not be reached. Move a slider to try again.";
      });
  }

  function schedule() {
    if (pending !== null) { clearTimeout(pending); }
    pending = setTimeout(ask, DEBOUNCE_MS);
  }

  // --- drawing the answer -------------------------------------------------------------------
  function reach(name, reached, step) {
    var node = field(name);
    node.textContent = reached ? "" : "not reached: step " + step + " decided first";
    node.closest(".lab-part").classList.toggle("is-unreached", !reached);
  }

  function draw(answer) {
    var decision = answer.decision;
    var verdict = root.querySelector(".lab-verdict");
    verdict.dataset.route = decision.route;
    field("route").textContent = decision.route === "draft_refine" ? "draft on device, refine in cloud" : decision.route;
    field("step-text").textContent = decision.step_text + (decision.queue_until_online ? "; queued for the cloud until back online" : "");
    field("explain").textContent = decision.explain;
    field("published-mode").textContent = "(" + (answer.cell.overridden && checked("mode") ? "published: " : "") + publishedModeOf(answer) + ")";

    // Score: the three weighted terms, with a bar each on the same 0–1 scale.
    var terms = field("terms");
    terms.textContent = "";
    answer.score.terms.forEach(function (term) {
      var row = el("tr");
      var label = el("td", "", TERM_LABEL[term.name] || term.name);
      label.title = TERM_HINT[term.name] || "";
      row.appendChild(label);
      row.appendChild(el("td", "right mono", fmt(term.weight)));
      row.appendChild(el("td", "right mono", fmt(term.signal)));
      row.appendChild(el("td", "right mono", fmt(term.term, 3)));
      var barCell = el("td", "lab-bar-col");
      var bar = el("span", "lab-bar lab-bar-" + term.name);
      bar.style.width = Math.max(0, Math.min(100, term.term * 100)) + "%";
      barCell.appendChild(bar);
      row.appendChild(barCell);
      terms.appendChild(row);
    });
    field("score").textContent = fmt(answer.score.value, 3);
    reach("score-reach", answer.score.reached, decision.step);

    // θ: base, each adjustment, effective.
    var theta = answer.threshold;
    var adjust = field("adjustments");
    adjust.textContent = "";
    var baseRow = el("tr");
    baseRow.appendChild(el("td", "", answer.cell.overridden && thetaTouched ? "θ set here" : "θ of the cell"));
    baseRow.appendChild(el("td", "right mono", fmt(theta.base)));
    adjust.appendChild(baseRow);
    theta.adjustments.forEach(function (item) {
      var row = el("tr", "lab-adjust-" + item.name);
      var name = el("td", "", ADJUST_LABEL[item.name] || item.name);
      name.title = item.text;
      row.appendChild(name);
      row.appendChild(el("td", "right mono", signed(item.delta)));
      adjust.appendChild(row);
    });
    if (!theta.adjustments.length) {
      var none = el("tr", "muted");
      none.appendChild(el("td", "", "no adjustment: good network, device not busy, no pressure"));
      none.appendChild(el("td", "", ""));
      adjust.appendChild(none);
    }
    var effective = el("tr", "lab-effective");
    effective.appendChild(el("th", "", "effective θ"));
    effective.appendChild(el("th", "right mono", fmt(theta.effective)));
    adjust.appendChild(effective);
    field("compare").textContent = "score " + fmt(answer.score.value) + (theta.score_below ? " < " : " ≥ ") + "θ " + fmt(theta.effective) +
      (theta.score_below ? ": easy enough for the device" : ": hard enough for the cloud");
    reach("theta-reach", theta.reached, decision.step);

    // Cloud latency: the three parts against the budget, on one bar.
    var latency = answer.latency;
    var total = latency.predicted_cloud_ms;
    var scale = Math.max(latency.budget_ms, total === null ? latency.budget_ms * 1.5 : total) * 1.1;
    var bar = field("latency-bar");
    var parts = [latency.upload_ms === null ? scale : latency.upload_ms, latency.rtt_ms, latency.cloud_infer_ms];
    bar.querySelectorAll(".seg").forEach(function (seg, index) {
      seg.style.width = Math.max(0, Math.min(100, parts[index] / scale * 100)) + "%";
    });
    bar.querySelector(".budget-mark").style.left = Math.min(100, latency.budget_ms / scale * 100) + "%";
    bar.classList.toggle("over-budget", !latency.within_budget);
    field("latency-text").textContent = "upload " + ms(latency.upload_ms) + " + RTT " + ms(latency.rtt_ms) + " + inference " + ms(latency.cloud_infer_ms) +
      " = " + ms(total) + (latency.within_budget ? " ≤ " : " > ") + "budget " + ms(latency.budget_ms) +
      (latency.within_budget ? ": the cloud would answer in time" : ": too slow, step 7 keeps it on the device");
    reach("latency-reach", latency.reached, decision.step);

    // Privacy and cost.
    var privacy = answer.privacy;
    var text;
    if (privacy.violation) {
      text = "Violation: " + privacy.tier + " data leaves the device although this cell forbids upload.";
    } else if (privacy.keeps_data_on_device) {
      text = "Kept on the device: the tier is sensitive and this cell forbids upload.";
    } else if (privacy.data_leaves_device) {
      text = "The task's data goes to the cloud" + (privacy.deidentify ? ", de-identified first" : "") + (privacy.upload_allowed ? " (this cell allows upload)." : ".");
    } else {
      text = "The task's data stays on the device.";
    }
    var privacyNode = field("privacy-text");
    privacyNode.textContent = text;
    privacyNode.closest(".lab-part").classList.toggle("is-violation", privacy.violation);
    field("cost-text").textContent = answer.cost.cloud_calls
      ? "Cloud cost of this task: " + answer.cost.amount.toFixed(6) + " " + answer.cost.currency + " (1 call, " + body().task.tokens + " tokens)."
      : "Cloud cost of this task: none (no cloud call).";

    drawMatrix(answer);
    samples = answer.samples || [];
    field("stream-note").textContent = samples.length ? "" : "No recorded task of this cell in the last 24 h carries its signals.";
    field("stream-count").textContent = String(samples.length);
    if (answer.samples_device_ms) {
      field("device-ms").textContent = Math.round(answer.samples_device_ms.value) + " ms";
      field("device-ms-source").textContent = answer.samples_device_ms.source;
    }
  }

  var publishedModes = {};
  function publishedModeOf(answer) {
    var key = [answer.cell.task_type, answer.cell.latency_budget, answer.cell.privacy_tier].join("/");
    return publishedModes[key] || answer.cell.mode;
  }

  function drawMatrix(answer) {
    var picked = [answer.cell.task_type, answer.cell.latency_budget, answer.cell.privacy_tier].join("/");
    (answer.matrix || []).forEach(function (cell) {
      var key = [cell.task_type, cell.latency_budget, cell.privacy_tier].join("/");
      var td = document.querySelector('.lab-mcell[data-cell="' + key + '"]');
      if (!td) { return; }
      td.dataset.route = cell.route;
      td.classList.toggle("is-picked", key === picked);
      field("mroute", td).textContent = cell.route === "draft_refine" ? "draft+refine" : cell.route;
      var reason = cell.decided_by in WHY ? WHY[cell.decided_by] : cell.decided_by;
      var why = cell.mode + " · " + reason;
      if (cell.score !== null) {
        why += (reason ? ", " : "") + "score " + fmt(cell.score) + (cell.score < cell.threshold ? " < " : " ≥ ") + "θ " + fmt(cell.threshold);
      }
      field("mwhy", td).textContent = why;
    });
  }

  // --- the stream of sample tasks -----------------------------------------------------------
  var streamIndex = 0;
  var recent = [];
  var paused = false;
  function stream() {
    if (paused || !samples.length || document.hidden) { return; }
    var sample = samples[streamIndex % samples.length];
    streamIndex += 1;
    var lane = sample.route === "device" ? "device" : "cloud";
    var track = document.querySelector('[data-track="' + lane + '"]');
    var dot = el("span", "lab-dot lab-dot-" + sample.route, String(sample.tokens));
    dot.title = sample.tokens + " tokens, intent " + fmt(sample.intent_conf) + ", model " + fmt(sample.lm_conf) + " → " + sample.route + " (" + sample.decided_by + ")";
    track.appendChild(dot);
    setTimeout(function () { dot.remove(); }, 3000);
    recent.push(sample);
    if (recent.length > STREAM_WINDOW) { recent.shift(); }
    var onDevice = recent.filter(function (s) { return s.route === "device"; }).length;
    var known = recent.filter(function (s) { return s.latency_ms !== null; });
    var sum = known.reduce(function (total, s) { return total + s.latency_ms; }, 0);
    field("alpha").textContent = Math.round(onDevice / recent.length * 100) + "%";
    field("avg-latency").textContent = known.length ? Math.round(sum / known.length) + " ms" : "–";
  }

  // --- wiring -------------------------------------------------------------------------------
  function showValue(input) {
    var out = root.querySelector('[data-out="' + input.name + '"]');
    if (!out) { return; }
    var value = Number(input.value);
    var unit = input.dataset.unit || "";
    var text = Number(input.step) < 1 ? value.toFixed(2) : Math.round(value).toLocaleString("en");
    if (input.name === "cloud_pressure") { text = (value >= 0 ? "+" : "") + value.toFixed(2); unit = ""; }
    out.textContent = text + (unit && unit !== "θ" ? " " + unit : "");
  }

  root.querySelectorAll('input[type="range"]').forEach(function (input) {
    showValue(input);
    input.addEventListener("input", function () {
      showValue(input);
      if (input === thetaSlider) {
        thetaTouched = true;
        resetTheta.hidden = false;
      }
      schedule();
    });
  });
  root.querySelectorAll('input[type="checkbox"], input[name="mode"]').forEach(function (input) {
    input.addEventListener("change", schedule);
  });
  document.querySelectorAll('input[name="samples"]').forEach(function (input) {
    input.addEventListener("change", function () { recent = []; streamIndex = 0; schedule(); });
  });

  // A new cell or version: θ and the mode start again from what that cell says.
  function cellChanged() {
    thetaTouched = false;
    resetTheta.hidden = true;
    var asPublished = root.querySelector('input[name="mode"][value=""]');
    asPublished.checked = true;
    recent = [];
    fetchPublished();
  }
  root.querySelectorAll('[data-control="cell"]').forEach(function (select) {
    select.addEventListener("change", cellChanged);
  });
  // Another version may have other cells (a draft can add a task type): the page is redrawn.
  root.querySelector('[data-control="version"]').addEventListener("change", function (event) {
    window.location.search = "?version=" + encodeURIComponent(event.target.value);
  });
  resetTheta.addEventListener("click", function () {
    thetaTouched = false;
    resetTheta.hidden = true;
    fetchPublished();
  });

  // The cell as published (mode, θ): asked without an override, then the slider follows it.
  function fetchPublished() {
    var request = body();
    request.override = {};
    request.matrix = false;
    request.samples = "none";
    fetch(apiUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(request)
    })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (answer) {
        if (answer) {
          publishedTheta = answer.cell.threshold;
          publishedModes[[answer.cell.task_type, answer.cell.latency_budget, answer.cell.privacy_tier].join("/")] = answer.cell.mode;
          if (!thetaTouched) {
            thetaSlider.value = publishedTheta;
            showValue(thetaSlider);
          }
        }
        ask();
      })
      .catch(ask);
  }

  document.querySelectorAll("[data-pick]").forEach(function (button) {
    button.addEventListener("click", function () {
      var parts = button.dataset.pick.split("/");
      root.querySelector('[name="task_type"]').value = parts[0];
      root.querySelector('[name="latency_budget"]').value = parts[1];
      root.querySelector('[name="privacy_tier"]').value = parts[2];
      cellChanged();
    });
  });

  var pauseButton = document.querySelector('[data-action="pause"]');
  pauseButton.addEventListener("click", function () {
    paused = !paused;
    pauseButton.textContent = paused ? "Play" : "Pause";
  });

  publishedModes[[first.cell.task_type, first.cell.latency_budget, first.cell.privacy_tier].join("/")] = first.cell.mode;
  draw(first);
  setInterval(stream, STREAM_EVERY_MS);
  stream();
})();
