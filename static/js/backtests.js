// The backtests page: while a backtest is queued or running, poll its API and move the
// progress bar; reload the page once it is done (or failed) to show the results.
(function () {
  "use strict";
  var section = document.getElementById("backtest-result");
  var version = document.getElementById("backtest-version");
  var revision = document.getElementById("backtest-revision");
  if (version && revision) {
    // The draft's revision goes with the draft only (a published version has none).
    var sync = function () {
      revision.value = version.value === "draft" ? revision.dataset.draftRevision : "";
    };
    version.addEventListener("change", sync);
    sync();
  }
  if (!section) return;
  var status = section.dataset.status;
  if (status !== "queued" && status !== "running") return;
  var bar = section.querySelector(".backtest-progress-bar");
  var meter = section.querySelector(".backtest-progress");
  var done = section.querySelector('[data-field="done"]');
  var total = section.querySelector('[data-field="total"]');
  function poll() {
    fetch(section.dataset.api, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body) { window.setTimeout(poll, 3000); return; }
        var percent = Math.round(body.progress * 100);
        if (bar) bar.style.width = percent + "%";
        if (meter) meter.setAttribute("aria-valuenow", String(percent));
        if (done) done.textContent = String(body.events_done);
        if (total) total.textContent = String(body.events_total);
        if (body.status === "done" || body.status === "failed") { window.location.reload(); return; }
        window.setTimeout(poll, 1000);
      })
      .catch(function () { window.setTimeout(poll, 3000); });
  }
  window.setTimeout(poll, 500);
})();
