// The schedule form's time zone defaults to the browser's, so a time is typed as the user reads it.
document.querySelectorAll("[data-browser-zone]").forEach((input) => {
  if (input.value === "UTC") {
    try {
      input.value = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
    } catch (e) {
      /* keep UTC */
    }
  }
});
