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

  const quote = document.getElementById("quote");

  // A control's text as the JSON its schema wants; undefined when it is left empty.
  function value(control) {
    const text = control.value.trim();
    if (text === "") return undefined;
    const lines = () => text.split("\n").map((line) => line.trim()).filter((line) => line !== "");
    switch (control.dataset.kind) {
      case "number": return Number(text);
      case "boolean": return text === "true";
      case "json": return JSON.parse(text);
      case "lines": return lines();
      case "number-lines": return lines().map((line) => line.split(/[\s,]+/).filter((n) => n !== "").map(Number));
      default: return text;
    }
  }

  // `a.b` names a member of the object `a`.
  function put(out, name, v) {
    const path = name.split(".");
    let at = out;
    for (const key of path.slice(0, -1)) at = at[key] = at[key] || {};
    at[path[path.length - 1]] = v;
  }

  function body() {
    const out = { model: form.dataset.model };
    for (const control of form.querySelectorAll("[data-kind]")) {
      if (control.closest(".item")) continue;
      if (control.dataset.kind === "items") {
        const items = [...control.querySelectorAll(".item")].map((row) => {
          const item = {};
          for (const member of row.querySelectorAll("[name]")) {
            const v = value(member);
            if (v !== undefined) item[member.name] = v;
          }
          return item;
        }).filter((item) => Object.keys(item).length > 0);
        if (items.length > 0) put(out, control.dataset.name, items);
        continue;
      }
      const v = value(control);
      if (v !== undefined) put(out, control.name, v);
    }
    return out;
  }

  // A list of items: rows added from the fieldset's template, up to its most.
  for (const list of form.querySelectorAll('fieldset[data-kind="items"]')) {
    const rows = list.querySelector("[data-rows]");
    const add = () => {
      if (list.dataset.max && rows.children.length >= Number(list.dataset.max)) return;
      rows.append(list.querySelector("template").content.cloneNode(true));
    };
    list.querySelector("[data-add]").addEventListener("click", add);
    rows.addEventListener("click", (event) => {
      if (event.target.matches("[data-remove]")) { event.target.closest(".item").remove(); priced(); }
    });
    if (list.hasAttribute("data-required")) add();
  }

  // What the job will cost, asked of the gateway as the form changes (the API's own checks and prices).
  let asked = 0;
  async function priced() {
    const mine = ++asked;
    let request;
    try { request = body(); } catch (e) { quote.textContent = "A JSON field is not valid JSON yet."; return; }
    const reply = await fetch("/console/playground/quote", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(request),
    });
    const said = await reply.json();
    if (mine !== asked) return;
    quote.dataset.state = reply.ok ? "priced" : "incomplete";
    quote.textContent = reply.ok ? "This job costs " + said.text + "."
      : "Not ready to submit: " + ((said.error && said.error.message) || reply.status);
  }
  let waiting;
  const soon = () => { clearTimeout(waiting); waiting = setTimeout(priced, 250); };
  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
  priced();

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
