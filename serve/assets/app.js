// The flexstruct explorer: a page over the service's JSON endpoints. No library; every text
// from the server is put in the page as text (never as markup). Spans are in code points, as
// the index counts them, so texts are cut with Array.from, never with UTF-16 string indices.
"use strict";

const state = { index: null, indexes: [], lastAnswer: null, lastAsk: null, polling: null };

// ---------- helpers ----------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function $(id) {
  return document.getElementById(id);
}

// Replaces a node's children with the given ones, leaving out the missing.
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function say(text, isError) {
  const status = $("status");
  status.textContent = text || "";
  status.className = isError ? "error" : "";
}

function token() {
  return sessionStorage.getItem("flexstruct-token") || "";
}

async function api(method, path, body, isForm) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  const init = { method, headers };
  if (body !== undefined) {
    if (isForm) init.body = body;
    else {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let value = null;
  try {
    value = text ? JSON.parse(text) : null;
  } catch (e) {
    value = { error: { message: text } };
  }
  if (!response.ok) {
    const error = (value && value.error) || {};
    const field = error.field ? " (" + error.field + ")" : "";
    throw new Error((error.message || response.statusText) + field);
  }
  return value;
}

function indexPath(rest) {
  return "/v1/indexes/" + encodeURIComponent(state.index) + rest;
}

function codePoints(text, start, end) {
  return Array.from(text).slice(start, end).join("");
}

function spanLabel(start, end) {
  return start === null || start === undefined ? "" : "characters " + start + "–" + end;
}

function docLink(docId, start, end, label) {
  let href = "#document/" + encodeURIComponent(docId);
  if (start !== null && start !== undefined) href += "?start=" + start + "&end=" + end;
  return el("a", { href, class: "doc-link", "data-doc": docId }, label || docId);
}

function show(view) {
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== "view-" + view;
  for (const link of document.querySelectorAll("header nav a")) {
    link.setAttribute("aria-current", link.id === "nav-" + view ? "page" : "false");
  }
}

// ---------- indexes and the token ----------

async function loadIndexes() {
  try {
    state.indexes = await api("GET", "/v1/indexes");
  } catch (e) {
    say("The indexes could not be listed: " + e.message + " (set a token?)", true);
    return;
  }
  const select = $("index");
  select.replaceChildren(...state.indexes.map((i) => el("option", { value: i.name }, i.name)));
  const remembered = sessionStorage.getItem("flexstruct-index");
  state.index = state.indexes.some((i) => i.name === remembered) ? remembered : (state.indexes[0] || {}).name;
  select.value = state.index || "";
  fillModes();
}

function fillModes() {
  const info = state.indexes.find((i) => i.name === state.index);
  if (!info) return;
  const mode = $("mode");
  mode.replaceChildren(...info.modes.map((m) => el("option", { value: m, selected: m === info.default_mode }, m)));
}

// ---------- asking ----------

async function ask(event) {
  if (event) event.preventDefault();
  const question = $("question").value.trim();
  if (!question) return;
  const toggles = {};
  for (const box of document.querySelectorAll("#toggles input")) toggles[box.dataset.toggle] = box.checked;
  const body = { index: state.index, question, mode: $("mode").value, toggles };
  const budget = $("budget").value;
  if (budget !== "") body.budget = Number(budget);
  $("ask-button").disabled = true;
  say("Asking…");
  try {
    const answer = await api("POST", "/v1/query", body);
    state.lastAnswer = answer;
    state.lastAsk = body;
    renderAnswer(answer);
    say("");
  } catch (e) {
    say(e.message, true);
  } finally {
    $("ask-button").disabled = false;
  }
}

// A citation of evidence `number`: from the answer (`exact`), it opens the span the answer rests
// on inside that evidence (its citation), else the evidence's whole span.
function citationButton(number, evidence, exact) {
  const span = exact ? citedSpan(state.lastAnswer, evidence) : evidence;
  return el(
    "button",
    {
      type: "button",
      class: "cite",
      "data-evidence": number,
      title: evidence ? evidence.doc_id + " " + spanLabel(span.start, span.end) : "",
      onclick: () => {
        location.hash = "#document/" + encodeURIComponent(evidence.doc_id) + (span.start !== null && span.start !== undefined ? "?start=" + span.start + "&end=" + span.end : "");
      },
    },
    "[" + number + "]",
  );
}

// The answer's citation that lies inside `evidence`, or the evidence itself.
function citedSpan(answer, evidence) {
  if (!answer || !evidence || evidence.start === null || evidence.start === undefined) return evidence;
  const inside = (answer.citations || []).find((c) => c.doc_id === evidence.doc_id && c.start >= evidence.start && c.end <= evidence.end);
  return inside || evidence;
}

// Puts the documents' titles on their links (a span of no characters gives a document's title).
async function nameDocuments(docIds) {
  state.titles = state.titles || new Map();
  for (const id of new Set(docIds)) {
    const key = state.index + "\u0000" + id;
    if (!state.titles.has(key)) {
      try {
        const doc = await api("GET", indexPath("/documents/" + encodeURIComponent(id) + "?start=0&end=0"));
        state.titles.set(key, doc.title || id);
      } catch (e) {
        state.titles.set(key, id);
      }
    }
    for (const link of document.querySelectorAll("#result a.doc-link[data-doc]")) {
      if (link.dataset.doc === id) link.textContent = state.titles.get(key);
    }
  }
}

// The answer's text with each [n] it holds as a button.
function answerText(answer) {
  const parts = [];
  const pattern = /\[(\d+)\]/g;
  let last = 0;
  let match;
  while ((match = pattern.exec(answer.answer)) !== null) {
    parts.push(answer.answer.slice(last, match.index));
    const n = Number(match[1]);
    parts.push(answer.evidence[n - 1] ? citationButton(n, answer.evidence[n - 1], true) : match[0]);
    last = pattern.lastIndex;
  }
  parts.push(answer.answer.slice(last));
  return parts;
}

function renderAnswer(answer) {
  const cited = new Set(answer.cited);
  const text = answer.answer ? answerText(answer) : ["(no answer: nothing was retrieved)"];
  const inText = /\[\d+\]/.test(answer.answer);
  const sources = answer.cited.length && !inText ? el("p", { class: "sources" }, "Sources: ", answer.cited.map((n) => citationButton(n, answer.evidence[n - 1], true))) : null;
  const left = el(
    "div",
    { class: "answer" },
    el("h2", {}, "Answer"),
    el("p", { id: "answer-text" }, text),
    answer.short_answer && answer.short_answer !== answer.answer ? el("p", { class: "short" }, "Short answer: ", el("strong", {}, answer.short_answer)) : null,
    answer.support && answer.support !== answer.answer ? el("blockquote", { class: "support" }, answer.support) : null,
    sources,
    answer.notes && answer.notes.length ? el("ul", { class: "notes" }, answer.notes.map((n) => el("li", {}, n))) : null,
    el("p", { class: "meta" }, answer.variant + " · " + answer.context_tokens + " context tokens · " + answer.generator + " · retrieval " + answer.retrieval_ms.toFixed(1) + " ms"),
  );
  const items = answer.evidence.map((e, i) =>
    el(
      "li",
      { class: cited.has(i + 1) ? "cited" : "", id: "evidence-" + (i + 1) },
      el("div", { class: "evidence-head" }, citationButton(i + 1, e), " ", el("span", { class: "unit" }, e.unit), " ", el("span", { class: "score" }, e.score.toFixed(3)), " ", docLink(e.doc_id, e.start, e.end, e.doc_id), " ", el("span", { class: "span" }, spanLabel(e.start, e.end))),
      el("p", {}, e.text),
    ),
  );
  const right = el("div", { class: "evidence" }, el("h2", {}, "Evidence (" + answer.evidence.length + (answer.trimmed ? ", " + answer.trimmed + " trimmed" : "") + ")"), el("ol", {}, items));
  $("result").replaceChildren(left, right);
  nameDocuments(answer.evidence.map((e) => e.doc_id));
}

// ---------- a document with a highlighted span ----------

async function renderDocument(docId, start, end) {
  show("document");
  const view = $("view-document");
  view.replaceChildren(el("p", {}, "Loading…"));
  let doc;
  try {
    doc = await api("GET", indexPath("/documents/" + encodeURIComponent(docId)));
  } catch (e) {
    view.replaceChildren(el("p", { class: "error" }, e.message));
    return;
  }
  const chars = Array.from(doc.text);
  const body = el("div", { class: "document-text", tabindex: "0" });
  if (start !== null && end !== null && start <= end && end <= chars.length) {
    const mark = el("mark", { id: "cited-span" }, chars.slice(start, end).join(""));
    body.append(chars.slice(0, start).join(""), mark, chars.slice(end).join(""));
  } else {
    body.append(doc.text);
  }
  const back = state.lastAnswer ? el("a", { href: "#ask", class: "back" }, "← Back to the answer") : null;
  fill(
    view,
    back,
    el("h2", {}, doc.title || doc.doc_id),
    el("p", { class: "meta" }, doc.doc_id + " · " + doc.source + " · " + doc.n_chars + " characters" + (start !== null ? " · cited " + spanLabel(start, end) : "")),
    body,
  );
  const mark = $("cited-span");
  if (mark) {
    mark.scrollIntoView({ block: "center" });
    mark.setAttribute("tabindex", "-1");
    mark.focus({ preventScroll: true });
  }
}

// ---------- documents: list, upload, delete, jobs ----------

async function renderDocuments(offset) {
  show("documents");
  const list = $("document-list");
  let page;
  try {
    page = await api("GET", indexPath("/documents?limit=50&offset=" + (offset || 0)));
  } catch (e) {
    list.replaceChildren(el("p", { class: "error" }, e.message));
    return;
  }
  const rows = page.documents.map((d) =>
    el(
      "tr",
      {},
      el("td", {}, d.doc_id && d.status === "processed" ? docLink(d.doc_id, null, null, d.title || d.doc_id) : d.title || d.doc_id || d.source),
      el("td", {}, d.source),
      el("td", { class: "status-" + d.status }, d.status + (d.stage ? " (" + d.stage + ")" : "")),
      el("td", {}, d.message || (d.n_chars !== undefined ? d.n_chars + " characters" : "")),
      el("td", {}, d.doc_id && d.status === "processed" ? el("button", { type: "button", class: "delete", onclick: () => removeDocument(d.doc_id) }, "Delete") : ""),
    ),
  );
  const pager = el(
    "p",
    { class: "pager" },
    page.offset > 0 ? el("button", { type: "button", onclick: () => renderDocuments(Math.max(0, page.offset - page.limit)) }, "Previous") : null,
    " " + (page.total ? page.offset + 1 : 0) + "–" + Math.min(page.total, page.offset + page.limit) + " of " + page.total + " (kb generation " + page.generation + ") ",
    page.offset + page.limit < page.total ? el("button", { type: "button", onclick: () => renderDocuments(page.offset + page.limit) }, "Next") : null,
  );
  list.replaceChildren(
    pager,
    el("table", {}, el("thead", {}, el("tr", {}, ["Document", "Source", "Status", "", ""].map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows)),
  );
}

async function upload(event) {
  event.preventDefault();
  const files = $("files").files;
  const pasted = $("paste").value;
  try {
    let accepted;
    if (files.length) {
      const form = new FormData();
      for (const file of files) form.append("file", file, file.name);
      accepted = await api("POST", indexPath("/documents"), form, true);
    } else if (pasted.trim()) {
      const record = { text: pasted };
      if ($("paste-title").value.trim()) record.title = $("paste-title").value.trim();
      accepted = await api("POST", indexPath("/documents"), { documents: [record] });
    } else {
      say("Choose files or paste a text first.", true);
      return;
    }
    $("upload-form").reset();
    say("Job " + accepted.id + " queued.");
    follow(accepted.id);
  } catch (e) {
    say(e.message, true);
  }
}

async function removeDocument(docId) {
  if (!confirm("Delete " + docId + " from " + state.index + "?")) return;
  try {
    const accepted = await api("DELETE", indexPath("/documents/" + encodeURIComponent(docId)));
    say("Job " + accepted.id + " queued.");
    follow(accepted.id);
  } catch (e) {
    say(e.message, true);
  }
}

function renderJob(job) {
  const docs = job.documents.map((d) => el("li", { class: "status-" + d.status }, (d.source || "") + ": " + d.status + (d.stage ? " (" + d.stage + ")" : "") + (d.message ? " — " + d.message : "")));
  return el("div", { class: "job", id: "job-" + job.id }, el("p", {}, "Job " + job.id + " (" + job.kind + "): " + job.state + (job.stage ? ", " + job.stage : "") + (job.generation ? ", kb generation " + job.generation : "") + (job.error ? " — " + job.error : "")), el("ul", {}, docs));
}

// Polls a job until it ends, showing its documents' statuses.
function follow(id) {
  clearInterval(state.polling);
  const tick = async () => {
    let job;
    try {
      job = await api("GET", indexPath("/jobs/" + encodeURIComponent(id)));
    } catch (e) {
      say(e.message, true);
      clearInterval(state.polling);
      return;
    }
    $("jobs").replaceChildren(renderJob(job));
    if (job.state === "done" || job.state === "failed") {
      clearInterval(state.polling);
      say("Job " + id + " " + job.state + ".", job.state === "failed");
      await loadIndexes();
      if (location.hash.startsWith("#documents")) renderDocuments(0);
    }
  };
  state.polling = setInterval(tick, 700);
  tick();
}

// ---------- entities and hyperedges ----------

async function findEntities(event) {
  if (event) event.preventDefault();
  const query = $("entity-query").value.trim();
  if (!query) return;
  try {
    const hits = await api("GET", indexPath("/entities?q=" + encodeURIComponent(query)));
    $("entity-hits").replaceChildren(
      hits.length
        ? el("ul", {}, hits.map((h) => el("li", {}, el("a", { href: "#entity/" + encodeURIComponent(h.id) }, h.name), " — " + (h.title || h.doc_id) + ", " + h.hyperdegree + " hyperedges (" + h.via + ")")))
        : el("p", {}, "No entity matches."),
    );
  } catch (e) {
    say(e.message, true);
  }
}

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function short(text, n) {
  const chars = Array.from(text);
  return chars.length > n ? chars.slice(0, n - 1).join("") + "…" : text;
}

// The entity's neighbourhood as a bipartite picture: the entity in the middle, its hyperedges
// (squares) around it, and the other entities of those hyperedges (circles) outside; every
// node a link.
function neighbourhood(entity) {
  const width = 640;
  const height = 520;
  const cx = width / 2;
  const cy = height / 2;
  const hyperedges = entity.hyperedges.slice(0, 16);
  const others = new Map();
  for (const h of hyperedges) for (const e of h.entities) if (e.id !== entity.id && !others.has(e.id) && others.size < 24) others.set(e.id, e);
  const root = svg("svg", { viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": "Neighbourhood of " + entity.name + ": " + hyperedges.length + " hyperedges, " + others.size + " entities", class: "graph" });
  const place = (i, n, r) => {
    const angle = (2 * Math.PI * i) / Math.max(n, 1) - Math.PI / 2;
    return [cx + r * Math.cos(angle), cy + r * Math.sin(angle)];
  };
  const hPos = new Map(hyperedges.map((h, i) => [h.id, place(i, hyperedges.length, 120)]));
  const ePos = new Map([...others.keys()].map((id, i) => [id, place(i + 0.5, others.size, 225)]));
  ePos.set(entity.id, [cx, cy]);
  const lines = svg("g", { class: "links" });
  for (const h of hyperedges) {
    const [hx, hy] = hPos.get(h.id);
    for (const e of h.entities) {
      const p = ePos.get(e.id);
      if (p) lines.append(svg("line", { x1: hx, y1: hy, x2: p[0], y2: p[1] }));
    }
  }
  root.append(lines);
  for (const h of hyperedges) {
    const [x, y] = hPos.get(h.id);
    const link = svg("a", { href: "#hyperedge/" + encodeURIComponent(h.id), class: "hyperedge-node" }, svg("title", {}, h.text), svg("rect", { x: x - 9, y: y - 9, width: 18, height: 18 }));
    root.append(link);
  }
  for (const [id, e] of others) {
    const [x, y] = ePos.get(id);
    root.append(svg("a", { href: "#entity/" + encodeURIComponent(id), class: "entity-node" }, svg("title", {}, e.name), svg("circle", { cx: x, cy: y, r: 8 }), svg("text", { x, y: y + 22, "text-anchor": "middle" }, short(e.name, 18))));
  }
  root.append(svg("g", { class: "entity-node centre" }, svg("circle", { cx, cy, r: 13 }), svg("text", { x: cx, y: cy + 30, "text-anchor": "middle" }, short(entity.name, 24))));
  return root;
}

function hyperedgeItem(h) {
  return el("li", {}, el("a", { href: "#hyperedge/" + encodeURIComponent(h.id) }, h.text), " ", h.start !== undefined ? docLink(h.doc_id, h.start, h.end, "source") : el("span", { class: "meta" }, "(span not located)"));
}

function entityLink(e) {
  return el("a", { href: "#entity/" + encodeURIComponent(e.id) }, e.name);
}

async function renderEntity(id) {
  show("entity");
  const view = $("view-entity");
  let entity;
  try {
    entity = await api("GET", indexPath("/entities/" + encodeURIComponent(id)));
  } catch (e) {
    view.replaceChildren(el("p", { class: "error" }, e.message));
    return;
  }
  fill(
    view,
    el("h2", {}, entity.name),
    el("p", { class: "meta" }, entity.id + " · in ", docLink(entity.doc_id, null, null, entity.title || entity.doc_id), " · " + entity.hyperdegree + " hyperedges"),
    entity.aliases.length ? el("p", {}, "Also: " + entity.aliases.join(", ")) : null,
    el("p", { class: "summary" }, entity.summary),
    neighbourhood(entity),
    el("h3", {}, "Hyperedges"),
    el("ol", {}, entity.hyperedges.map(hyperedgeItem)),
    entity.edges.length ? el("h3", {}, "Edges") : null,
    entity.edges.length ? el("ul", {}, entity.edges.map((e) => el("li", {}, e.source ? entityLink(e.source) : "?", " — " + e.text + " — ", e.target ? entityLink(e.target) : "?"))) : null,
    entity.clusters.length ? el("h3", {}, "Clusters") : null,
    entity.clusters.length ? el("ul", {}, entity.clusters.map((c) => el("li", {}, el("strong", {}, c.id + " (" + c.hyperedges.length + " hyperedges): "), short(c.text, 400)))) : null,
    entity.neighbours.length ? el("h3", {}, "Neighbours") : null,
    entity.neighbours.length ? el("ul", { class: "inline" }, entity.neighbours.map((n) => el("li", {}, entityLink(n), " (" + n.shared + ")"))) : null,
    entity.same_name.length ? el("h3", {}, "The same name in other documents") : null,
    entity.same_name.length ? el("ul", {}, entity.same_name.map((e) => el("li", {}, entityLink(e), " — " + e.doc_id))) : null,
  );
  view.focus();
}

async function renderHyperedge(id) {
  show("hyperedge");
  const view = $("view-hyperedge");
  let h;
  try {
    h = await api("GET", indexPath("/hyperedges/" + encodeURIComponent(id)));
  } catch (e) {
    view.replaceChildren(el("p", { class: "error" }, e.message));
    return;
  }
  fill(
    view,
    el("h2", {}, "Hyperedge " + h.id),
    el("p", { class: "fact" }, h.text),
    el("blockquote", {}, h.ref_text),
    el("p", { class: "meta" }, "In ", docLink(h.doc_id, h.start, h.end, h.title || h.doc_id), " " + spanLabel(h.start, h.end)),
    el("h3", {}, "Entities"),
    el("ul", { class: "inline" }, h.entities.map((e) => el("li", {}, entityLink(e)))),
    h.edges.length ? el("h3", {}, "Edges") : null,
    h.edges.length ? el("ul", {}, h.edges.map((e) => el("li", {}, e.text))) : null,
    h.clusters.length ? el("h3", {}, "Clusters") : null,
    h.clusters.length ? el("ul", {}, h.clusters.map((c) => el("li", {}, c.id + ": " + short(c.text, 400)))) : null,
  );
}

// ---------- routing ----------

function route() {
  const hash = decodeURI(location.hash.slice(1));
  const [path, query] = location.hash.slice(1).split("?");
  const params = new URLSearchParams(query || "");
  const [view, ...rest] = path.split("/");
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : null;
  say("");
  if (view === "document" && arg) {
    const start = params.has("start") ? Number(params.get("start")) : null;
    const end = params.has("end") ? Number(params.get("end")) : null;
    renderDocument(arg, start, end);
  } else if (view === "documents") renderDocuments(0);
  else if (view === "entities") show("entities");
  else if (view === "entity" && arg) renderEntity(arg);
  else if (view === "hyperedge" && arg) renderHyperedge(arg);
  else {
    show("ask");
    if (hash === "ask" && state.lastAnswer) renderAnswer(state.lastAnswer);
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  $("ask-form").addEventListener("submit", ask);
  $("question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) ask(e);
  });
  $("upload-form").addEventListener("submit", upload);
  $("entity-form").addEventListener("submit", findEntities);
  $("index").addEventListener("change", (e) => {
    state.index = e.target.value;
    sessionStorage.setItem("flexstruct-index", state.index);
    fillModes();
    route();
  });
  $("token-button").addEventListener("click", async () => {
    const value = prompt("Bearer token (kept for this tab only; empty to clear):", "");
    if (value === null) return;
    if (value) sessionStorage.setItem("flexstruct-token", value.trim());
    else sessionStorage.removeItem("flexstruct-token");
    await loadIndexes();
  });
  window.addEventListener("hashchange", route);
  await loadIndexes();
  route();
});
