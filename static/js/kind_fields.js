// Forms whose fields depend on the kind of change chosen (schedules, change requests): only the
// chosen kind's fields are shown, the others hidden and disabled (so they are not posted).
// Without JavaScript every field shows, each saying which kinds it is for, and the server takes
// only the chosen kind's fields.
document.querySelectorAll("form[data-kind-form]").forEach((form) => {
  const kind = form.querySelector("select[name=kind]");
  if (!kind) return;
  const show = () => {
    form.querySelectorAll("[data-kinds]").forEach((field) => {
      const wanted = field.dataset.kinds.split(" ").includes(kind.value);
      field.hidden = !wanted;
      field.querySelectorAll("input, select, textarea").forEach((input) => {
        input.disabled = !wanted;
      });
    });
  };
  form.classList.add("kind-fields-live");
  kind.addEventListener("change", show);
  show();
});
