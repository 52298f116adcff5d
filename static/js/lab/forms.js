/* The settings forms htmx swaps: collapsible groups keep their open or closed state across a
 * swap and open when it brings an error inside them; lesson mode's copy of the dependency's
 * mode follows its form; htmx errors that swap no form are said in #action-status. */

/** Say ``text`` in the page's action line (#action-status), as an error or not. */
export function actionMessage(text, isError) {
  const status = document.getElementById("action-status");
  if (!status) return;
  status.textContent = text;
  status.classList.toggle("is-error", !!isError);
}

export function startForms() {
  /* A swapped form comes back with each group in its default state: keep what the student
     opened or closed (by the group's id), and open every group, and "All settings", that
     holds an error. */
  let openBefore = null;
  document.body.addEventListener("htmx:beforeSwap", function () {
    openBefore = {};
    document.querySelectorAll("details.field-group[id]").forEach(function (d) { openBefore[d.id] = d.open; });
  });
  document.body.addEventListener("htmx:afterSwap", function () {
    if (openBefore) {
      Object.keys(openBefore).forEach(function (id) {
        const d = document.getElementById(id);
        if (d && !d.querySelector(".has-error")) d.open = openBefore[id];
      });
      openBefore = null;
    }
    // Lesson mode: the dependency's mode, from its form (closed away under "All settings").
    const mode = document.querySelector('#dependency-form [data-role="mode"]');
    const lessonMode = document.querySelector('#this-step [data-role="lesson-mode"]');
    if (mode && lessonMode) lessonMode.textContent = mode.textContent;
    document.querySelectorAll("#lab .has-error, #lab .form-errors").forEach(function (el) {
      for (let d = el.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) d.open = true;
    });
  });

  document.body.addEventListener("htmx:responseError", function (event) {
    const code = event.detail.xhr ? event.detail.xhr.status : 0;
    if (code === 400 || code === 409 || code === 422) return; // the form shows why
    if (code === 403) actionMessage("Only the session's owner can change it; you are watching it.", true);
    else if (code === 404) actionMessage("This session is not available to you.", true);
    else actionMessage("The server could not do that (HTTP " + code + "); try again.", true);
  });
  document.body.addEventListener("htmx:sendError", function () {
    actionMessage("Could not reach the server; check the connection and try again.", true);
  });
}
