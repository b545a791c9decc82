// The rollout page, live: poll GET /api/v1/fleets/<slug>/rollout/ every second and update the
// stage, state, convergence table and propagation in place. Element ids and data attributes
// are the page's contract with this script: rows are <tr data-version="N"> and their cells
// [data-field=assigned|acked|acked_online]. Without JavaScript the page is a plain snapshot.
(function () {
  "use strict";

  var POLL_MS = 1000;
  var HIDDEN_POLL_MS = 10000;
  var TIMEOUT_MS = 5000;

  var root = document.getElementById("rollout-live");
  if (!root) { return; }

  var statusUrl = root.dataset.statusUrl;
  // What the page's buttons were rendered for; a different rollout or state makes them stale.
  var loaded = {
    id: root.dataset.loadedRollout || "",
    state: root.dataset.loadedState || "",
    stage: root.dataset.loadedStage || ""
  };
  var indicator = document.querySelector("[data-live-indicator]");
  var indicatorText = indicator && indicator.querySelector("[data-live-text]");
  var statusCard = document.getElementById("rollout-status");
  var rowsBody = document.querySelector("[data-convergence-rows]");
  var rowTemplate = document.getElementById("convergence-row");
  var staleNotice = document.querySelector("[data-stale-notice]");

  // Tests and people debugging can see that updates arrive without the page reloading.
  var live = window.rolloutLive = { updates: 0, errors: 0, loadedAt: Date.now(), last: null };

  var STATE_LABELS = { active: "active", paused: "paused", completed: "completed", rolled_back: "rolled back" };
  var ROLE_LABELS = { stable: "stable", candidate: "candidate", other: "not assigned" };

  function all(selector, scope) {
    return Array.prototype.slice.call((scope || document).querySelectorAll(selector));
  }

  function setText(selector, text, scope) {
    all(selector, scope).forEach(function (el) {
      if (el.textContent !== text) { el.textContent = text; }
    });
  }

  function number(value) {
    return Number(value || 0).toLocaleString("en-US");
  }

  function two(n) { return (n < 10 ? "0" : "") + n; }

  function clockUtc(date) {
    return two(date.getUTCHours()) + ":" + two(date.getUTCMinutes()) + ":" + two(date.getUTCSeconds());
  }

  // The same wording as rollout_views.ago().
  function ago(date) {
    var seconds = Math.max(0, Math.floor((Date.now() - date.getTime()) / 1000));
    if (seconds < 10) { return "just now"; }
    if (seconds < 60) { return seconds + " s ago"; }
    if (seconds < 3600) { return Math.floor(seconds / 60) + " min ago"; }
    if (seconds < 86400) {
      return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min ago";
    }
    return Math.floor(seconds / 86400) + " d ago";
  }

  // The same wording as rollout_views.duration_text().
  function duration(ms) {
    if (ms == null) { return "—"; }
    if (ms < 10000) { return number(Math.round(ms)) + " ms"; }
    if (ms < 120000) { return (ms / 1000).toFixed(1) + " s"; }
    if (ms < 7200000) { return (ms / 60000).toFixed(1) + " min"; }
    return (ms / 3600000).toFixed(1) + " h";
  }

  // The same wording as rollout_views.next_text().
  function nextText(rollout) {
    if (!rollout) { return "start a rollout of a published version, or switch the whole fleet at once"; }
    if (rollout.state === "completed") {
      return "nothing: v" + rollout.candidate + " is stable; start a new rollout when one is ready";
    }
    if (rollout.state === "rolled_back") { return "nothing: every device is back on v" + rollout.stable; }
    var upcoming = {
      5: "advance to 25%, then 100%, then complete",
      25: "advance to 100%, then complete"
    }[rollout.stage] || ("complete: v" + rollout.candidate + " becomes stable");
    return rollout.state === "paused" ? "resume, then " + upcoming : upcoming;
  }

  function sinceOf(rollout) {
    if (rollout.open) { return { phrase: "at " + rollout.stage + "% since", at: rollout.stage_changed_at }; }
    if (rollout.state === "completed") {
      return { phrase: "completed at", at: rollout.finished_at || rollout.stage_changed_at };
    }
    return { phrase: "rolled back from " + rollout.stage + "% at", at: rollout.finished_at || rollout.stage_changed_at };
  }

  function span(className, field, text) {
    var el = document.createElement("span");
    if (className) { el.className = className; }
    el.dataset.field = field;
    el.textContent = text;
    return el;
  }

  // "Rolling out v2 over stable v1" / "Last rollout: v2 over v1", rebuilt if it said "No rollout yet".
  function renderHeadline(rollout) {
    var headline = statusCard.querySelector("[data-field=headline]");
    if (headline && !headline.querySelector("[data-field=headline-kind]")) {
      headline.textContent = "";
      [span("", "headline-kind", ""), span("chip chip-candidate", "candidate", ""),
        span("", "over", ""), span("chip chip-stable", "rollout-stable", "")].forEach(function (el, index) {
        if (index) { headline.appendChild(document.createTextNode(" ")); }
        headline.appendChild(el);
      });
    }
    setText("[data-field=headline-kind]", rollout.open ? "Rolling out" : "Last rollout:", statusCard);
    setText("[data-field=candidate]", "v" + rollout.candidate, statusCard);
    setText("[data-field=over]", rollout.open ? "over stable" : "over", statusCard);
    setText("[data-field=rollout-stable]", "v" + rollout.stable, statusCard);
    setText("[data-field=rollout-id]", "rollout #" + rollout.id, statusCard);
    setText("[data-field=reason-text]", rollout.reason || "", statusCard);
    setText("[data-field=salt]", rollout.salt || "", statusCard);
    all("[data-field=rollout-id], [data-field=state], [data-field=since], [data-field=salt-line]", statusCard).forEach(function (el) {
      el.hidden = false;
    });
    all("[data-field=no-rollout]", statusCard).forEach(function (el) { el.hidden = true; });
    all("[data-field=reason]", statusCard).forEach(function (el) { el.hidden = !rollout.reason; });
    setText("[data-field=holdback]", String(rollout.holdback || 0), statusCard);
    setText("[data-field=holdback-stable]", String(rollout.stable), statusCard);
    setText("[data-field=holdback-from]", String(rollout.candidate_share), statusCard);
    all("[data-field=holdback-line]", statusCard).forEach(function (el) {
      el.hidden = !(rollout.open && rollout.holdback);
    });
    // A scoped rollout's segment (its rule's sentence is the server's: a new rollout asks
    // for a reload above).
    setText("[data-field=scope]", rollout.segment || "", statusCard);
    all("[data-field=scope-line]", statusCard).forEach(function (el) {
      el.hidden = !(rollout.open && rollout.segment);
    });
  }

  function renderRollout(rollout, stable) {
    setText("[data-field=stable]", stable ? "v" + stable : "none yet");
    setText("[data-field=stable-run]", stable ? "v" + stable : "no version yet");
    setText("[data-field=next]", nextText(rollout));
    if (!rollout || !statusCard) { return; }
    statusCard.dataset.rolloutState = rollout.state;
    renderHeadline(rollout);
    all("[data-field=state]", statusCard).forEach(function (chip) {
      chip.textContent = STATE_LABELS[rollout.state] || rollout.state;
      chip.className = "state-chip state-" + rollout.state;
    });
    all(".stage", statusCard).forEach(function (step) {
      var percent = Number(step.dataset.stage);
      var state = "todo";
      if (rollout.state === "completed" || percent < rollout.stage) { state = "done"; }
      else if (percent === rollout.stage) { state = "current"; }
      if (step.dataset.step !== state) { step.dataset.step = state; }
    });
    var since = sinceOf(rollout);
    setText("[data-field=since-phrase]", since.phrase, statusCard);
    if (since.at) {
      var at = new Date(since.at);
      all("[data-field=since-time]", statusCard).forEach(function (el) {
        el.setAttribute("datetime", since.at);
        el.textContent = clockUtc(at) + " UTC";
      });
      setText("[data-field=ago]", ago(at), statusCard);
    }
    var changed = String(rollout.id) !== loaded.id || rollout.state !== loaded.state ||
      String(rollout.stage) !== loaded.stage;
    if (staleNotice) {
      staleNotice.hidden = !changed;
      if (changed) {
        setText("[data-stale-what]",
          "now rollout #" + rollout.id + " of v" + rollout.candidate + ", " +
          (STATE_LABELS[rollout.state] || rollout.state) + " at " + rollout.stage + "%", staleNotice);
      }
    }
  }

  function rowFor(version) {
    var row = rowsBody.querySelector('tr[data-version="' + version + '"]');
    if (row) { return row; }
    var empty = rowsBody.querySelector(".row-empty");
    if (empty) { empty.remove(); }
    row = rowTemplate.content.firstElementChild.cloneNode(true);
    row.dataset.version = String(version);
    row.querySelector("th").textContent = "v" + version;
    // Newest version first, as the server renders them.
    var before = all("tr[data-version]", rowsBody).filter(function (other) {
      return Number(other.dataset.version) < version;
    })[0];
    rowsBody.insertBefore(row, before || null);
    return row;
  }

  function share(part, whole) {
    return whole ? Math.min(100, (100 * part) / whole).toFixed(1) + "%" : "0%";
  }

  function renderRow(row, data, total) {
    var role = data ? data.role : "none";
    if (row.dataset.role !== role) { row.dataset.role = role; }
    row.classList.toggle("row-idle", !data);
    setText("[data-field=role] .role-tag", ROLE_LABELS[role] || "not assigned", row);
    var assigned = data ? data.assigned : 0;
    var acked = data ? data.acked : 0;
    setText("[data-field=assigned]", number(assigned), row);
    setText("[data-field=acked]", number(acked), row);
    setText("[data-field=acked_online]", number(data ? data.acked_online : 0), row);
    row.querySelector(".conv-assigned").style.width = share(assigned, total);
    row.querySelector(".conv-acked").style.width = share(acked, total);
    row.querySelector(".conv-bar").setAttribute(
      "aria-label", acked + " of " + total + " acked, " + assigned + " assigned");
  }

  function renderConvergence(convergence) {
    setText("[data-field=devices]", number(convergence.devices));
    setText("[data-field=online]", number(convergence.online));
    var seen = {};
    convergence.versions.forEach(function (data) {
      seen[data.version] = true;
      renderRow(rowFor(data.version), data, convergence.devices);
    });
    // A version nobody is assigned nor runs any more keeps its row, at zero.
    all("tr[data-version]", rowsBody).forEach(function (row) {
      if (!seen[row.dataset.version]) { renderRow(row, null, convergence.devices); }
    });
    var propagation = convergence.propagation || {};
    setText("[data-field=p50]", duration(propagation.p50_ms));
    setText("[data-field=p95]", duration(propagation.p95_ms));
    setText("[data-field=p99]", duration(propagation.p99_ms));
    setText("[data-field=propagation-last]", duration(propagation.last_ms));
    setText("[data-field=propagation-count]", number(propagation.count));
    setText("[data-field=propagation-plural]", propagation.count === 1 ? "" : "s");
    all("[data-field=last-change]").forEach(function (el) {
      if (!convergence.last_change_at) { el.textContent = "never"; return; }
      el.setAttribute("datetime", convergence.last_change_at);
      el.textContent = clockUtc(new Date(convergence.last_change_at)) + " UTC";
    });
  }

  // "Not acked": how many devices do not run their assigned version yet, and the first of them
  // (the same words as the page's template).
  function renderNotAcked(behind, devices) {
    var box = document.querySelector("[data-not-acked]");
    if (!box || !behind) { return; }
    box.dataset.count = String(behind.count);
    var summary = box.querySelector("[data-not-acked-summary]");
    summary.textContent = "";
    if (behind.count) {
      var strong = document.createElement("strong");
      strong.textContent = String(behind.count);
      summary.appendChild(strong);
      summary.appendChild(document.createTextNode(behind.count === 1
        ? " device not yet on its assigned version"
        : " devices not yet on their assigned version"));
    } else {
      summary.textContent = devices ? "every device acked its assigned version" : "no device has enrolled yet";
    }
    setText("[data-not-acked-more]", behind.count > behind.devices.length
      ? "the first " + behind.devices.length + " by id" : "", box);
    var list = box.querySelector("[data-not-acked-list]");
    var items = behind.devices.map(function (device) {
      var item = document.createElement("li");
      item.dataset.deviceId = device.device_id;
      var id = document.createElement("code");
      id.className = "not-acked-id";
      id.textContent = device.device_id;
      id.title = device.device_id;
      var detail = document.createElement("span");
      detail.className = "muted small";
      detail.textContent = "v" + device.assigned_version + " assigned · " +
        (device.acked_version ? "runs v" + device.acked_version : "no ack yet") + " · " +
        (device.online ? "online" : "offline");
      item.appendChild(id);
      item.appendChild(document.createTextNode(" "));
      item.appendChild(detail);
      return item;
    });
    var same = items.length === list.children.length && items.every(function (item, index) {
      return list.children[index].textContent === item.textContent;
    });
    if (!same) { list.replaceChildren.apply(list, items); }
  }

  function showStatus(status, text) {
    if (!indicator) { return; }
    indicator.dataset.status = status;
    if (indicatorText.textContent !== text) { indicatorText.textContent = text; }
  }

  function apply(data) {
    renderRollout(data.rollout, data.stable_version);
    renderConvergence(data.convergence);
    renderNotAcked(data.convergence.not_acked, data.convergence.devices);
    live.updates += 1;
    live.last = data;
    showStatus("live", "live · updated " + clockUtc(new Date()) + " UTC");
  }

  function fail(error) {
    live.errors += 1;
    var signedOut = error && (error.status === 401 || error.status === 403);
    showStatus("offline", signedOut ? "not live: signed out, reload to log in" : "not live: retrying…");
  }

  var pending = null;
  var inFlight = false;

  function schedule() {
    pending = setTimeout(poll, document.hidden ? HIDDEN_POLL_MS : POLL_MS);
  }

  function poll() {
    pending = null;
    inFlight = true;
    var controller = window.AbortController ? new AbortController() : null;
    var timer = controller ? setTimeout(function () { controller.abort(); }, TIMEOUT_MS) : null;
    fetch(statusUrl, {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
      cache: "no-store",
      signal: controller ? controller.signal : undefined
    })
      .then(function (response) {
        if (!response.ok) {
          var error = new Error("HTTP " + response.status);
          error.status = response.status;
          throw error;
        }
        return response.json();
      })
      .then(apply)
      .catch(fail)
      .then(function () {
        clearTimeout(timer);
        inFlight = false;
        schedule();
      });
  }

  // Back to a visible tab: refresh at once rather than after the slow hidden interval.
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && pending !== null && !inFlight) {
      clearTimeout(pending);
      poll();
    }
  });

  showStatus("connecting", "connecting…");
  poll();
})();
