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
  var retryMs = 500;

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
    if (!all.length) {
      banner.hidden = true;
      return;
    }
    var newest = all[0];
    countEl.textContent = all.length + " firing";
    textEl.textContent = "[" + newest.fleet + "] " + newest.name + ": " + newest.message;
    textEl.title = textEl.textContent;
    linkEl.href = "/fleets/" + encodeURIComponent(newest.fleet) + "/alerts/";
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
      } else {
        firingByFleet[data.fleet] = data.firing;
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
