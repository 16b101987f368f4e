// The Lockgate console page. Every text that came from the record is inserted as text
// (textContent / text nodes), never as markup; model and adapter text is labelled untrusted.
"use strict";

(() => {
  const TOKEN_KEY = "lockgate.console.token";
  const TERMINAL = ["rejected", "denied", "completed", "failed", "refused", "withdrawn", "interrupted"];
  const $ = (id) => document.getElementById(id);
  let token = "";
  let me = null;
  let nextBefore = null;
  let openIntent = null;
  let refreshTimer = null;
  let streamAbort = null;

  // -- building the page out of text -----------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.className = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else if (key === "onclick" || key === "onsubmit" || key === "ontoggle") node.addEventListener(key.slice(2), value);
      else node[key] = value;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function untrusted(what, value) {
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    return el("div", { class: "untrusted" }, el("span", { class: "tag" }, "untrusted · " + what),
      el("pre", {}, text));
  }

  function facts(pairs) {
    const dl = el("dl");
    for (const [name, value] of pairs) {
      if (value === null || value === undefined || value === "") continue;
      dl.append(el("dt", {}, name), el("dd", {}, String(value)));
    }
    return dl;
  }

  function labelOf(intent) {
    return el("span", { class: "label " + intent.label.code, "data-label": intent.label.code }, intent.label.text);
  }

  function say(text, isError) {
    const m = $("message");
    m.textContent = text;
    m.className = isError ? "error" : "";
  }

  // -- the API ---------------------------------------------------------------------------

  async function api(path, method, body) {
    const init = { method: method || "GET", headers: { Authorization: "Bearer " + token } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    let answer = {};
    try { answer = await response.json(); } catch (_) { answer = { error: "http." + response.status }; }
    if (!response.ok) {
      if (response.status === 401) signOut(answer.detail || answer.error);
      const error = new Error(answer.detail || answer.error);
      error.code = answer.error;
      throw error;
    }
    return answer;
  }

  // -- signing in and out ----------------------------------------------------------------

  function signOut(why) {
    sessionStorage.removeItem(TOKEN_KEY);
    token = "";
    me = null;
    if (streamAbort) streamAbort.abort();
    $("main").hidden = true;
    $("signout").hidden = true;
    $("signin").hidden = false;
    $("who").textContent = "";
    $("signin-error").textContent = why || "";
  }

  async function signIn(candidate) {
    token = candidate.trim();
    try {
      me = await api("/api/me");
    } catch (error) {
      signOut("not accepted: " + (error.code || error.message));
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    $("signin").hidden = true;
    $("main").hidden = false;
    $("signout").hidden = false;
    const scope = me.tenants.length ? me.tenants.join(", ") : "every tenant";
    $("who").textContent = me.name + " · " + me.role + " · " + scope;
    $("outcomes-section").hidden = me.role !== "operator";
    $("nav-shadow").hidden = me.role !== "operator";
    // An intent's own address (/intents/<id>, as other pages link it) opens it.
    const linked = /^\/intents\/([A-Za-z0-9_-]{1,64})$/.exec(location.pathname);
    if (linked) openIntent = linked[1];
    await refresh();
    live();
  }

  // -- the review inbox ------------------------------------------------------------------

  function reviewCard(review) {
    const card = el("li", { class: "card review", "data-review-id": review.review_id,
      "data-intent-id": review.intent_id, "data-digest": review.digest });
    card.append(
      el("h3", {}, review.tool + " · " + review.tenant),
      el("div", { class: "untrusted consequence-box" },
        el("span", { class: "tag" }, "consequence · quoted values are the model's: untrusted"),
        el("p", { class: "consequence" }, review.summary)));
    for (const [name, text] of Object.entries(review.shown || {})) {
      card.append(untrusted("the model's " + name + ", verbatim", text));
    }
    card.append(facts([["rests on", (review.preconditions || []).join("; ")],
      ["if it goes wrong", (review.recovery || []).join("; ")],
      ["requested", review.requested_at], ["expires", review.expires_at]]));
    if (me.role === "reviewer") {
      const reason = el("input", { type: "text", placeholder: "why (recorded with your decision)", maxLength: 300,
        class: "reason" });
      const approve = el("button", { type: "button", class: "approve", onclick: () => decide(review, true, reason, card) },
        "Approve");
      const deny = el("button", { type: "button", class: "deny", onclick: () => decide(review, false, reason, card) },
        "Deny");
      const edit = el("button", { type: "button", class: "edit", onclick: () => editForm(review, reason, card) },
        "Edit…");
      card.append(el("div", { class: "actions" }, approve, deny, edit, reason));
    }
    const detail = el("details", { class: "technical" }, el("summary", {}, "Technical detail"));
    detail.addEventListener("toggle", () => { if (detail.open && detail.childElementCount === 1) technical(review, detail); });
    card.append(detail,
      el("button", { type: "button", class: "link", onclick: () => showIntent(review.intent_id) }, "Timeline"));
    return card;
  }

  async function technical(review, into) {
    try {
      const d = await api("/api/intents/" + encodeURIComponent(review.intent_id) + "/review");
      into.append(
        facts([["digest", d.review.digest], ["review", d.review.review_id], ["intent", d.intent.intent_id],
          ["actor", d.intent.actor], ["destination", d.destination], ["effect class", d.effect_class],
          ["resource", JSON.stringify(d.resource)], ["policy revision", d.review.policy_revision],
          ["contract revision", d.review.contract_revision], ["policy reasons", d.policy_reasons.join(", ")],
          ["decidable", d.decidable ? "yes" : "no"]]),
        untrusted("normalized arguments (what the digest covers)", d.arguments),
        untrusted("arguments as the model proposed them", d.proposed_arguments));
    } catch (error) {
      into.append(el("p", { class: "error" }, error.code || error.message));
    }
  }

  async function decide(review, approve, reason, card) {
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    try {
      const verb = approve ? "approve" : "deny";
      const done = await api("/api/intents/" + encodeURIComponent(review.intent_id) + "/review/" + verb, "POST",
        { review_id: review.review_id, digest: review.digest, reason: reason.value });
      say(done.recorded + " by " + done.by + " (" + review.tool + ", " + review.digest.slice(0, 19) + "…)");
      card.remove();
      scheduleRefresh();
    } catch (error) {
      say("not recorded: " + (error.code || error.message), true);
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
  }

  async function editForm(review, reason, card) {
    if (card.querySelector("form.edit-form")) return;
    let proposed = {};
    try {
      proposed = (await api("/api/intents/" + encodeURIComponent(review.intent_id) + "/review")).proposed_arguments;
    } catch (_) { /* an empty form still works */ }
    const text = el("textarea", { class: "arguments", rows: 4, cols: 60, spellcheck: false });
    text.value = JSON.stringify(proposed);
    const form = el("form", { class: "edit-form" },
      el("p", { class: "hint" }, "Narrower arguments become a new candidate: the original will not run, and the new one " +
        "crosses every gate again (its own digest, its own review if policy asks)."),
      text, el("div", { class: "actions" }, el("button", { type: "submit" }, "Propose instead")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        const made = await api("/api/intents/" + encodeURIComponent(review.intent_id) + "/review/edit", "POST",
          { review_id: review.review_id, digest: review.digest, arguments: text.value, reason: reason.value });
        say("edited by " + made.by + " into candidate " + made.candidate_id + "; it crosses every gate again");
        card.remove();
        scheduleRefresh();
      } catch (error) {
        say("not edited: " + (error.code || error.message), true);
      }
    });
    card.append(form);
  }

  async function loadInbox() {
    const list = await api("/api/reviews?status=waiting");
    const inbox = $("inbox");
    inbox.replaceChildren(...list.items.map(reviewCard));
    $("inbox-empty").hidden = list.items.length > 0;
  }

  // -- unknown outcomes (operators) ------------------------------------------------------

  function outcomeCard(intent) {
    const why = el("input", { type: "text", placeholder: "your evidence (required)", maxLength: 500, class: "why" });
    const finding = el("select", { class: "finding" },
      el("option", { value: "confirmed" }, "it happened (confirmed)"),
      el("option", { value: "absent" }, "it did not happen (absent)"));
    const card = el("li", { class: "card outcome", "data-intent-id": intent.intent_id });
    const record = el("button", { type: "button", class: "reconcile", onclick: async () => {
      record.disabled = true;
      try {
        const done = await api("/api/intents/" + encodeURIComponent(intent.intent_id) + "/reconcile", "POST",
          { finding: finding.value, why: why.value });
        say(done.recorded + " by " + done.by);
        scheduleRefresh();
      } catch (error) {
        say("not recorded: " + (error.code || error.message), true);
        record.disabled = false;
      }
    } }, "Record");
    card.append(el("h3", {}, intent.tool + " · " + intent.tenant), labelOf(intent),
      facts([["intent", intent.intent_id], ["state", intent.state], ["reason", intent.reason],
        ["attempts", intent.attempts], ["updated", intent.updated_at]]),
      el("div", { class: "actions" }, finding, why, record),
      el("button", { type: "button", class: "link", onclick: () => showIntent(intent.intent_id) }, "Timeline"));
    return card;
  }

  async function loadOutcomes() {
    if (!me || me.role !== "operator") return;
    const list = await api("/api/outcomes");
    $("outcomes").replaceChildren(...list.items.map(outcomeCard));
    $("outcomes-empty").hidden = list.items.length > 0;
  }

  // -- intents and one intent's timeline -------------------------------------------------

  function intentRow(intent) {
    return el("tr", { "data-intent-id": intent.intent_id },
      el("td", {}, intent.updated_at.replace("T", " ").slice(0, 19)), el("td", {}, intent.tenant),
      el("td", {}, intent.tool), el("td", {}, labelOf(intent)), el("td", {}, intent.state),
      el("td", {}, el("button", { type: "button", class: "link", onclick: () => showIntent(intent.intent_id) }, "open")));
  }

  async function loadIntents(older) {
    const query = older && nextBefore !== null ? "?before=" + nextBefore : "";
    const page = await api("/api/intents" + query);
    const body = $("intents").tBodies[0];
    const rows = page.items.map(intentRow);
    if (older) body.append(...rows); else body.replaceChildren(...rows);
    nextBefore = page.next_before;
    $("older").hidden = nextBefore === null;
  }

  async function showIntent(intentId) {
    openIntent = intentId;
    let d;
    try {
      d = await api("/api/intents/" + encodeURIComponent(intentId));
    } catch (error) {
      say("cannot open " + intentId + ": " + (error.code || error.message), true);
      return;
    }
    const i = d.intent;
    $("detail-section").hidden = false;
    $("detail-id").textContent = i.intent_id;
    const label = $("detail-label");
    label.replaceChildren(labelOf(i));
    $("detail-facts").replaceWith(Object.assign(facts([["tenant", i.tenant], ["run", i.run_id], ["actor", i.actor],
      ["tool", i.tool], ["state", i.state], ["reason", i.reason], ["model was told", i.model_status],
      ["attempts", i.attempts], ["attempt stage", i.attempt_stage], ["destination", i.destination]]), { id: "detail-facts" }));
    const actions = $("detail-actions");
    actions.replaceChildren();
    if (me.role === "operator" && !TERMINAL.includes(i.state)) {
      const why = el("input", { type: "text", placeholder: "why", maxLength: 300 });
      const stop = el("button", { type: "button", class: "withdraw", onclick: async () => {
        try {
          const told = await api("/api/intents/" + encodeURIComponent(i.intent_id) + "/withdraw", "POST", { why: why.value });
          say("the model is now told: " + told.status);
          scheduleRefresh();
        } catch (error) { say("not withdrawn: " + (error.code || error.message), true); }
      } }, "Withdraw");
      actions.append(el("div", { class: "actions" }, stop, why));
    }
    $("timeline").replaceChildren(...d.timeline.map((e) => el("li", { "data-type": e.type },
      el("strong", {}, e.words), " ", el("code", {}, e.type), " · " + e.recorded_at.replace("T", " ").slice(0, 23),
      el("details", {}, el("summary", {}, "recorded data"), untrusted("as recorded: holds model and adapter text", e.data)))));
    $("detail-section").scrollIntoView({ block: "nearest" });
  }

  // -- keeping up to date ----------------------------------------------------------------

  async function loadViews() {
    const state = await api("/api/views");
    $("views").textContent = state.lag === null ? "views: lag unknown"
      : state.lag === 0 ? "views up to date" : "views " + state.lag + " events behind";
  }

  async function refresh() {
    try {
      await Promise.all([loadInbox(), loadOutcomes(), loadIntents(false), loadViews()]);
      if (openIntent) await showIntent(openIntent);
    } catch (error) {
      say("could not load: " + (error.code || error.message), true);
    }
  }

  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 150);
  }

  async function live() {
    if (streamAbort) streamAbort.abort();
    const abort = new AbortController();
    streamAbort = abort;
    let delay = 500;
    while (!abort.signal.aborted && token) {
      try {
        const response = await fetch("/api/stream", { headers: { Authorization: "Bearer " + token }, signal: abort.signal });
        if (response.status === 401) { signOut("the token is no longer accepted"); return; }
        if (!response.ok || !response.body) throw new Error("http " + response.status);
        $("live").textContent = "live";
        $("live").className = "live on";
        delay = 500;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const event = /^event: (.*)$/m.exec(block);
            if (!event) continue;
            if (event[1] === "changed") scheduleRefresh();
            if (event[1] === "expired") { signOut("the token has expired"); return; }
          }
        }
      } catch (error) {
        if (abort.signal.aborted) return;
      }
      $("live").textContent = "reconnecting";
      $("live").className = "live off";
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 10000);
    }
  }

  // -- start -----------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", (event) => {
      event.preventDefault();
      signIn($("token").value);
    });
    $("signout").addEventListener("click", () => signOut(""));
    $("older").addEventListener("click", () => loadIntents(true));
    // A token handed over in the fragment (never sent to the server) is taken and removed.
    const fromFragment = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (fromFragment) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(fromFragment[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    const kept = sessionStorage.getItem(TOKEN_KEY);
    if (kept) signIn(kept); else signOut("");
  });
})();
