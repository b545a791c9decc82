// Small page helpers shared by every page: confirmations, the import size check, and the
// "copy cells from" list of the add-value form. Every form also works without this script.
(function () {
  "use strict";

  document.documentElement.classList.add("js");

  // <form data-confirm="Are you sure?">: ask before submitting.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    // Refuse an import file over the server's limit before uploading it.
    document.querySelectorAll("input[type=file][data-max-bytes]").forEach(function (input) {
      var limit = parseInt(input.dataset.maxBytes, 10);
      var message = input.closest("label").querySelector("[data-size-error]");
      var submit = input.form.querySelector("button[type=submit]");
      input.addEventListener("change", function () {
        var file = input.files && input.files[0];
        var tooBig = file && file.size > limit;
        message.hidden = !tooBig;
        message.textContent = tooBig
          ? "This file is " + file.size.toLocaleString() + " bytes; the limit is " + limit.toLocaleString() + " bytes. Choose a smaller file."
          : "";
        submit.disabled = Boolean(tooBig);
      });
    });

    // Offer only the values of the chosen dimension as the source of the new cells.
    document.querySelectorAll("[data-dimension-select]").forEach(function (select) {
      var copyFrom = select.form.querySelector("[data-copy-from]");
      if (!copyFrom) { return; }
      function sync() {
        copyFrom.querySelectorAll("optgroup").forEach(function (group) {
          var match = group.dataset.dimension === select.value;
          group.hidden = !match;
          group.disabled = !match;
        });
        var chosen = copyFrom.selectedOptions[0];
        if (chosen && chosen.parentElement.tagName === "OPTGROUP" && chosen.parentElement.disabled) {
          copyFrom.value = "";
        }
      }
      select.addEventListener("change", sync);
      sync();
    });
  });
})();
