// The live alert banner on every page: one socket to /ws/ui/alerts/, no reload, no polling.
// The server sends every fleet's firing alerts on connect, then each fleet's list when it
// changes; the banner shows how many fire and the newest, linking to its fleet's alerts page.
(function () {
  "use strict";
  var banner = document.getElementById("alert-banner");
  if (!banner || !("WebSocket" in window)) return;
  var countEl = banner.querySelector("[data-field=count]");
  var textEl = banner.querySelector("[data-field=text]");
  var linkEl = banner.querySelector("[data-field=link]");
  var firingByFleet = {};
  var guardAction = null; // the latest rollback / advance / completion by a rollout's guards
  var GUARD_WORDS = { rolled_back: "rolled back", advanced: "advanced", completed: "completed" };
  var retryMs = 500;
  var connectedBefore = false;

  // Tell the page (alerts_page.js) which fleet's alerts changed; null: maybe any (a reconnect).
  function announce(fleet) {
    document.dispatchEvent(new CustomEvent("alerts:changed", { detail: { fleet: fleet } }));
  }

  // A page's figure of one fleet's firing alerts (the dashboard's big figure), if it has one.
  function renderFigures() {
    document.querySelectorAll("[data-alerts-fleet]").forEach(function (figure) {
      var firing = firingByFleet[figure.dataset.alertsFleet] || [];
      var value = figure.querySelector("[data-value]");
      var sub = figure.querySelector("[data-sub]");
      if (value) value.textContent = String(firing.length);
      if (sub) {
        sub.textContent = firing.length
          ? firing.map(function (alert) { return alert.name; }).join(", ")
          : "none firing";
      }
      figure.dataset.tone = firing.length ? "bad" : "good";
    });
  }

  function render() {
    renderFigures();
    var all = [];
    Object.keys(firingByFleet).forEach(function (fleet) {
      firingByFleet[fleet].forEach(function (alert) { all.push(alert); });
    });
    all.sort(function (a, b) { return (b.since || "").localeCompare(a.since || ""); });
    banner.dataset.firing = String(all.length);
    if (all.length) {
      var newest = all[0];
      show("firing", all.length + " firing", "[" + newest.fleet + "] " + newest.name + ": " +
        newest.message, "/fleets/" + encodeURIComponent(newest.fleet) + "/alerts/", "See the alerts");
    } else if (guardAction) {
      // Nothing fires, but a rollout's guards just acted: say so until the page changes.
      show(guardAction.kind, GUARD_WORDS[guardAction.kind], "[" + guardAction.fleet + "] " +
        guardAction.message, "/fleets/" + encodeURIComponent(guardAction.fleet) + "/rollout/",
        "See the rollout");
    } else {
      banner.hidden = true;
    }
  }

  function show(kind, count, text, href, linkText) {
    banner.dataset.kind = kind;
    countEl.textContent = count;
    textEl.textContent = text;
    textEl.title = text;
    linkEl.href = href;
    linkEl.textContent = linkText;
    banner.hidden = false;
  }

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + window.location.host + banner.dataset.alertsFeed);
    socket.onopen = function () { retryMs = 500; banner.dataset.live = "true"; };
    socket.onmessage = function (message) {
      var data;
      try { data = JSON.parse(message.data); } catch (error) { return; }
      if (data.type !== "alerts") return;
      if (data.fleet === null) {
        firingByFleet = {};
        data.firing.forEach(function (alert) {
          (firingByFleet[alert.fleet] = firingByFleet[alert.fleet] || []).push(alert);
        });
        // The first list after a reconnect: changes may have been missed while away.
        if (connectedBefore) announce(null);
        connectedBefore = true;
      } else {
        announce(data.fleet);
        firingByFleet[data.fleet] = data.firing;
        if (data.event && GUARD_WORDS[data.event.kind]) {
          guardAction = { fleet: data.fleet, kind: data.event.kind, message: data.event.message };
        }
      }
      render();
    };
    socket.onclose = function (event) {
      banner.dataset.live = "false";
      if (event.code === 4401 || event.code === 4403) return; // not allowed: do not retry
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    };
  }
  connect();
})();
