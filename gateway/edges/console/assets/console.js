// The playground: sends the form as the model's request JSON, then follows the task to its end.
"use strict";
(function () {
  const form = document.getElementById("playground");
  if (!form) return;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const progress = document.getElementById("progress");
  const preview = document.getElementById("preview");
  const answer = document.getElementById("answer");
  const terminal = ["success", "failed", "cancelled", "timeout"];

  function body() {
    const out = { model: form.dataset.model };
    for (const control of form.querySelectorAll("[data-kind]")) {
      const text = control.value.trim();
      if (text === "") continue;
      const kind = control.dataset.kind;
      out[control.name] = kind === "number" ? Number(text)
        : kind === "boolean" ? text === "true"
        : kind === "json" ? JSON.parse(text)
        : text;
    }
    return out;
  }

  function urls(value, found) {
    if (typeof value === "string" && /^https?:\/\//.test(value)) found.push(value);
    else if (value && typeof value === "object") for (const v of Object.values(value)) urls(v, found);
    return found;
  }

  function show(task) {
    answer.textContent = JSON.stringify(task, null, 2);
    const status = task.status || (task.error ? "failed" : "success");
    progress.textContent = "Status: " + status;
    progress.dataset.status = status;
    if (status !== "success") return;
    preview.replaceChildren(...urls(task.results || task, []).map((url) => {
      const media = document.createElement(form.dataset.media === "video" ? "video" : "img");
      media.src = url;
      if (media.tagName === "VIDEO") media.controls = true; else media.alt = "Result of " + form.dataset.model;
      return media;
    }));
  }

  async function follow(taskId) {
    for (;;) {
      const reply = await fetch("/console/playground/tasks/" + encodeURIComponent(taskId), { headers: { Accept: "application/json" } });
      const task = await reply.json();
      show(task);
      if (!reply.ok || terminal.includes(task.status)) return;
      await new Promise((done) => setTimeout(done, 1000));
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    preview.replaceChildren();
    let request;
    try { request = body(); } catch (e) { progress.textContent = "A JSON field is not valid JSON: " + e.message; return; }
    progress.textContent = "Submitting…";
    const reply = await fetch("/console/playground", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(request),
    });
    const task = await reply.json();
    if (!reply.ok) {
      progress.textContent = "Refused: " + ((task.error && task.error.message) || reply.status);
      progress.dataset.status = "refused";
      answer.textContent = JSON.stringify(task, null, 2);
      return;
    }
    show(task);
    if (task.task_id && !terminal.includes(task.status)) follow(task.task_id);
  });
})();
