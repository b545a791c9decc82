// The latency–privacy matrix editor: select cells (one by one, by row or by column) and edit
// them in the side panel. With one cell selected the panel shows its values; with several,
// fields stay blank ("unchanged") unless every selected cell shares the value, which is then
// shown as a placeholder. Fields the user typed into are never overwritten by a new selection.
(function () {
  "use strict";

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("edit-form");
    var dataNode = document.getElementById("cell-values");
    if (!form || !dataNode) { return; }
    var cellValues = JSON.parse(dataNode.textContent);
    var PINNED_MODES = ["device_only", "cloud_only"];
    // A refused save is rendered by the POST it answered (/draft/cells/, /draft/publish/…); put
    // the fleet page back in the address bar, so a reload or a shared link opens the grid.
    var fleetUrl = form.dataset.fleetUrl;
    if (fleetUrl && window.location.pathname !== fleetUrl && window.history.replaceState) {
      var selection = Array.prototype.slice.call(document.querySelectorAll(".cell-select:checked"))
        .map(function (box) { return "cell=" + encodeURIComponent(box.value).replace(/%2F/g, "/"); });
      window.history.replaceState(null, "", fleetUrl + (selection.length ? "?" + selection.join("&") : ""));
    }
    var refused = form.querySelector(".frow.invalid") !== null;
    var panel = form.closest(".edit-panel");
    var summary = form.querySelector("[data-selection-summary]");
    var saveButton = form.querySelector("[data-save]");
    var resetButton = form.querySelector("[data-reset]");
    var boxes = Array.prototype.slice.call(document.querySelectorAll(".cell-select"));
    var fields = Array.prototype.slice.call(form.querySelectorAll("[data-path]"));
    var rowToggles = document.querySelectorAll("[data-select-row]");
    var colToggles = document.querySelectorAll("[data-select-col]");

    function asText(value) {
      if (value === true) { return "true"; }
      if (value === false) { return "false"; }
      if (value === null || value === undefined) { return ""; }
      return String(value);
    }

    function displayText(field, text) {
      if (field.dataset.kind === "bool") { return text === "true" ? "yes" : "no"; }
      return text;
    }

    function selectedLabels() {
      return boxes.filter(function (box) { return box.checked; }).map(function (box) { return box.value; });
    }

    // A field the user has typed into keeps its value; anything filled in by the server after a
    // refused save counts as typed too, so the user's input survives.
    fields.forEach(function (field) {
      if (field.value !== "") { field.dataset.dirty = "1"; field.classList.add("dirty"); }
      field.addEventListener("input", markDirty);
      field.addEventListener("change", markDirty);
    });

    function markDirty(event) {
      var field = event.target;
      // A fixed value clears its message at once; a new mistake waits for Save.
      if (field.closest(".frow").querySelector("[data-client-error]") && !fieldProblem(field)) {
        showProblem(field, "");
      }
      if (field === modeField) { refreshThetaNote(selectedLabels()); }
      var single = selectedLabels();
      var original = single.length === 1 ? asText(cellValues[single[0]][field.dataset.path]) : "";
      var dirty = field.value !== original;
      field.dataset.dirty = dirty ? "1" : "";
      field.classList.toggle("dirty", dirty);
    }

    function setPlaceholder(field, text) {
      if (field.tagName === "SELECT") {
        field.options[0].textContent = text;
      } else {
        field.placeholder = text;
      }
    }

    function refreshFields(labels) {
      fields.forEach(function (field) {
        var path = field.dataset.path;
        var values = labels.map(function (label) { return asText(cellValues[label][path]); });
        var same = values.length > 0 && values.every(function (v) { return v === values[0]; });
        if (labels.length > 1) {
          setPlaceholder(field, same ? "all " + displayText(field, values[0]) : "mixed");
        } else {
          setPlaceholder(field, "unchanged");
        }
        if (field.dataset.dirty === "1") { return; }
        field.value = labels.length === 1 ? values[0] : "";
      });
    }

    function refreshSummary(labels) {
      summary.textContent = "";
      summary.classList.remove("nothing-changed");
      if (labels.length === 0) {
        summary.textContent = "Select one or more cells in the grid. Fill in only what should change: blank fields stay unchanged.";
      } else if (labels.length === 1) {
        summary.append("Editing ");
        var ref = document.createElement("span");
        ref.className = "cell-ref";
        ref.textContent = labels[0];
        summary.append(ref, refused ? ". Nothing was saved: fix the fields marked below, then save again." : ". Change any field, then save.");
      } else {
        summary.append("Editing " + labels.length + " cells. " + (refused ? "Nothing was saved: fix the fields marked below, then save again." : "Only the fields you fill in change, on every selected cell."));
      }
      panel.classList.toggle("has-selection", labels.length > 0);
      saveButton.disabled = labels.length === 0;
    }

    // θ does nothing where the mode pins the route; say so beside the field instead of
    // letting people tune a number that no device reads.
    var thetaField = form.querySelector('[data-path="threshold"]');
    var modeField = form.querySelector('[data-path="mode"]');
    var thetaNote = null;
    if (thetaField) {
      thetaNote = document.createElement("div");
      thetaNote.className = "fhint theta-na-note";
      thetaNote.setAttribute("data-theta-na", "");
      thetaNote.hidden = true;
      thetaField.closest(".frow").appendChild(thetaNote);
    }

    function refreshThetaNote(labels) {
      if (!thetaNote) { return; }
      var modes = labels.map(function (label) {
        return modeField && modeField.value ? modeField.value : cellValues[label].mode;
      });
      var pinned = modes.length > 0 && modes.every(function (mode) { return PINNED_MODES.indexOf(mode) >= 0; });
      thetaNote.hidden = !pinned;
      thetaNote.textContent = pinned
        ? "Not used: " + modes.filter(function (m, i) { return modes.indexOf(m) === i; }).join(" and ") +
          " cells route without a score, so θ changes nothing there."
        : "";
    }

    // The browser checks what it can (numbers, whole numbers, ranges) before the round trip;
    // the server checks everything again and stays the authority.
    function fieldProblem(field) {
      var kind = field.dataset.kind;
      var text = field.value.trim();
      if ((kind !== "float" && kind !== "int") || text === "") { return ""; }
      var number = Number(text);
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text) || !isFinite(number)) {
        var example = kind === "int" ? "a whole number such as 300" : "a number such as 0.6";
        return "must be " + example + "; got '" + text + "'";
      }
      if (kind === "int" && !Number.isInteger(number)) { return "must be a whole number; got " + text; }
      var low = field.dataset.min, high = field.dataset.max;
      if (low !== undefined && high !== undefined && (number < Number(low) || number > Number(high))) {
        return "must be in " + field.dataset.range + "; got " + text;
      }
      return "";
    }

    function showProblem(field, message) {
      var row = field.closest(".frow");
      var node = row.querySelector("[data-client-error]");
      if (!message) {
        if (node) { node.remove(); }
        if (!row.querySelector(".field-error")) { row.classList.remove("invalid"); }
        field.removeAttribute("aria-invalid");
        return;
      }
      if (!node) {
        node = document.createElement("div");
        node.className = "field-error";
        node.setAttribute("data-client-error", "");
        node.id = field.id + "-client-error";
        row.appendChild(node);
      }
      node.textContent = field.dataset.label + ": " + message;
      row.classList.add("invalid");
      field.setAttribute("aria-invalid", "true");
      field.setAttribute("aria-describedby", node.id);
    }

    function syncToggle(toggle, members) {
      var checked = members.filter(function (box) { return box.checked; }).length;
      toggle.checked = members.length > 0 && checked === members.length;
      toggle.indeterminate = checked > 0 && checked < members.length;
    }

    function refresh() {
      var labels = selectedLabels();
      boxes.forEach(function (box) {
        box.closest(".cell").classList.toggle("selected", box.checked);
      });
      rowToggles.forEach(function (toggle) {
        syncToggle(toggle, boxes.filter(function (box) { return box.dataset.row === toggle.dataset.selectRow; }));
      });
      colToggles.forEach(function (toggle) {
        syncToggle(toggle, boxes.filter(function (box) { return box.dataset.col === toggle.dataset.selectCol; }));
      });
      refreshFields(labels);
      refreshSummary(labels);
      refreshThetaNote(labels);
    }

    boxes.forEach(function (box) { box.addEventListener("change", refresh); });
    rowToggles.forEach(function (toggle) {
      toggle.addEventListener("change", function () {
        boxes.forEach(function (box) {
          if (box.dataset.row === toggle.dataset.selectRow) { box.checked = toggle.checked; }
        });
        refresh();
      });
    });
    colToggles.forEach(function (toggle) {
      toggle.addEventListener("change", function () {
        boxes.forEach(function (box) {
          if (box.dataset.col === toggle.dataset.selectCol) { box.checked = toggle.checked; }
        });
        refresh();
      });
    });
    resetButton.addEventListener("click", function () {
      fields.forEach(function (field) {
        field.dataset.dirty = "";
        field.classList.remove("dirty");
      });
      refresh();
    });

    // Send only what the user changed: prefilled values of a single cell are not edits.
    form.addEventListener("submit", function (event) {
      var labels = selectedLabels();
      var edited = fields.some(function (field) { return field.dataset.dirty === "1"; });
      if (labels.length > 0 && !edited) {
        // Nothing to send: say so here, in the user's terms, instead of a round trip.
        event.preventDefault();
        summary.textContent = labels.length === 1
          ? "Nothing changed: every field still shows the value " + labels[0] + " already has. Type a new value into a field, then save."
          : "Nothing changed: no field is filled in. Type a value into the fields that should change on the " + labels.length + " selected cells, then save.";
        summary.classList.add("nothing-changed");
        return;
      }
      var first = null;
      fields.forEach(function (field) {
        if (field.dataset.dirty !== "1") { return; }
        var problem = fieldProblem(field);
        showProblem(field, problem);
        if (problem && !first) { first = field; }
      });
      if (first) {
        event.preventDefault();
        first.focus();
        return;
      }
      fields.forEach(function (field) {
        if (field.dataset.dirty !== "1") { field.disabled = true; }
      });
    });
    window.addEventListener("pageshow", function () {
      fields.forEach(function (field) { field.disabled = false; });
    });

    refresh();
  });
})();
