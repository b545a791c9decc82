// The alerts page, live: when the alert feed (alerts_banner.js) reports a change of this
// fleet's alerts, or reconnects after a gap, the page fetches itself and swaps in the rules,
// the history and the delivery log. The forms (add a rule, add a webhook) are left alone, so
// nothing being typed is lost. No reload, no polling.
(function () {
  "use strict";
  var page = document.getElementById("alerts-page");
  if (!page || !window.fetch || !window.DOMParser) return;
  var fleet = page.dataset.fleet;
  var LIVE_PARTS = ["alert-rules", "alert-history", "webhook-deliveries"];
  var timer = null;
  var busy = false;
  var again = false;

  function swap(html) {
    var fetched = new DOMParser().parseFromString(html, "text/html");
    LIVE_PARTS.forEach(function (id) {
      var mine = document.getElementById(id);
      var theirs = fetched.getElementById(id);
      if (mine && theirs) mine.innerHTML = theirs.innerHTML;
    });
    var count = fetched.querySelector("[data-field=firing-count]");
    var myCount = document.querySelector("[data-field=firing-count]");
    if (count && myCount) myCount.textContent = count.textContent;
    page.dataset.refreshed = String(Number(page.dataset.refreshed || "0") + 1);
  }

  function refresh() {
    timer = null;
    if (busy) { again = true; return; }
    busy = true;
    // This page's address without its query (an "edit" link's query would open the editor).
    fetch(window.location.pathname, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html) swap(html); })
      .catch(function () { /* offline for a moment: the next change refreshes it */ })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  document.addEventListener("alerts:changed", function (event) {
    var changed = event.detail && event.detail.fleet;
    if (changed !== null && changed !== fleet) return; // another fleet's alerts
    if (timer === null) timer = window.setTimeout(refresh, 250); // several changes, one fetch
  });
})();
