// The segment editor's live count: as the rule is typed, the preview API says how many
// enrolled devices it matches (of how many), or why the rule is refused, and what to watch.
(function () {
  "use strict";
  function start() {
    var form = document.getElementById("segment-form");
    if (!form || !window.fetch) return;
    var input = form.querySelector("textarea[name=rule]");
    var box = form.querySelector("[data-live-count]");
    var text = box.querySelector("[data-count-text]");
    var warnings = box.querySelector("[data-count-warnings]");
    var timer = null;
    var asked = 0;

    function show(message, state, items) {
      text.textContent = message;
      box.classList.toggle("is-invalid", state === "invalid");
      box.classList.toggle("is-warned", state === "warned");
      warnings.textContent = "";
      (items || []).forEach(function (item) {
        var li = document.createElement("li");
        li.textContent = item.message;
        li.dataset.warning = item.code;
        warnings.appendChild(li);
      });
    }

    function count() {
      var rule;
      try {
        rule = JSON.parse(input.value);
      } catch (e) {
        show("Not JSON yet: " + e.message, "invalid");
        return;
      }
      var mine = ++asked;
      fetch(form.dataset.previewUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": form.dataset.csrf },
        body: JSON.stringify({ rule: rule })
      }).then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      }).then(function (answer) {
        if (mine !== asked) return; // a later keystroke asked again
        if (!answer.ok) {
          var details = (answer.body.error && answer.body.error.details) || [];
          var message = details.length ? details[0].field + ": " + details[0].message : (answer.body.error || {}).message;
          show(message || "Refused.", "invalid");
          return;
        }
        var body = answer.body;
        show(body.matching + " of " + body.devices + " enrolled devices match",
             body.warnings.length ? "warned" : "", body.warnings);
        text.dataset.matching = body.matching;
      }).catch(function () {
        if (mine === asked) show("Could not count (the server did not answer).", "invalid");
      });
    }

    function later() {
      window.clearTimeout(timer);
      timer = window.setTimeout(count, 250);
    }

    input.addEventListener("input", later);
    form.querySelectorAll("[data-example]").forEach(function (button) {
      button.addEventListener("click", function () {
        input.value = JSON.stringify(JSON.parse(button.dataset.example), null, 2);
        count();
      });
    });
    if (input.value.trim()) count();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
