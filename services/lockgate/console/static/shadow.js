// The shadow decisions page: what a shadow bundle would change, from /api/shadow. Every text
// from the record is inserted as text, never as markup.
"use strict";

(() => {
  const TOKEN_KEY = "lockgate.console.token";
  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.className = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else node[key] = value;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function side(decision) {
    const reasons = decision.reasons.length ? " (" + decision.reasons.join(", ") + ")" : "";
    return decision.outcome + reasons;
  }

  async function load() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) {
      $("message").replaceChildren("Sign in on ", el("a", { href: "/" }, "the console"), " first.");
      return;
    }
    const response = await fetch("/api/shadow", { headers: { Authorization: "Bearer " + token } });
    let answer = {};
    try { answer = await response.json(); } catch (_) { answer = { error: "http." + response.status }; }
    if (!response.ok) {
      $("message").textContent = "cannot read the shadow decisions: " + (answer.error || response.status);
      $("message").className = "error";
      return;
    }
    $("revision").textContent = answer.revision ? answer.revision.slice(0, 19) + "…" : "(none has decided yet)";
    $("flips").tBodies[0].replaceChildren(...answer.flips.map((f) => el("tr", { "data-tool": f.tool },
      el("td", {}, f.tool), el("td", { class: "flip" }, f.flip), el("td", {}, f.policy || "-"),
      el("td", {}, f.count))));
    $("flips-empty").hidden = answer.flips.length > 0;
    $("flipped").tBodies[0].replaceChildren(...answer.flipped.map((d) => el("tr", { "data-intent-id": d.intent_id },
      el("td", {}, d.decided_at.replace("T", " ").slice(0, 19)), el("td", {}, d.tenant), el("td", {}, d.tool),
      el("td", {}, side(d.active)), el("td", { class: "flip" }, side(d.shadow)), el("td", {}, d.policy || "-"),
      el("td", {}, el("a", { href: d.link }, "open")))));
  }

  document.addEventListener("DOMContentLoaded", () => {
    load().catch((error) => { $("message").textContent = "could not load: " + error.message; });
  });
})();
