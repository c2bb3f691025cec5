// The demo page: greedy and sampled outputs streamed side by side from POST /generate_stream,
// then the cross-attention of one of them from POST /explain, drawn as a table (rows: output
// tokens, columns: input tokens). Only this server is contacted (relative URLs), so the page
// works behind a path prefix too. Every error shows the server's own message.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

function authHeaders() {
  const key = $("#api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// Seeds are 64-bit integers, and JavaScript numbers hold integers exactly only below 2^53: the page
// keeps a seed as its decimal digits and writes them into the JSON text itself (and reads them back
// from the text of the stream's last event), so a seed the server picked explains the same tokens.
const SEED_SLOT = "__seed_digits__";

function post(path, inputs, parameters) {
  const { seed, ...rest } = parameters;
  const exact = typeof seed === "string" && /^-?\d+$/.test(seed);
  const params = seed === null || seed === undefined ? rest : { ...rest, seed: exact ? SEED_SLOT : seed };
  let body = JSON.stringify({ inputs, parameters: params });
  if (exact) body = body.replace(`"${SEED_SLOT}"`, seed);
  return fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json", ...authHeaders() },
    body,
  });
}

// "<status> <error_type>: <error>" from the server's error shape {"error", "error_type"}.
async function errorText(resp) {
  let text = `${resp.status} ${resp.statusText}`;
  try {
    const body = await resp.json();
    if (body && body.error) text = `${resp.status} ${body.error_type}: ${body.error}`;
  } catch (_) {
    /* not JSON: keep the status line */
  }
  return text;
}

function numberOrNull(selector) {
  const raw = $(selector).value.trim();
  return raw === "" ? null : Number(raw);
}

function textOrNull(selector) {
  const raw = $(selector).value.trim();
  return raw === "" ? null : raw;
}

function tokenLabel(tok) {
  if (tok.special) return "end";
  const text = (tok.token !== undefined ? tok.token : tok.text).trim();
  return text === "" ? "␣" : text;
}

// ---- one output panel (greedy or sampled) -----------------------------------------------------
class Panel {
  constructor(id) {
    this.root = document.getElementById(id);
    this.tokens = [];
  }
  set state(s) { this.root.dataset.state = s; }
  status(text) { $(".status", this.root).textContent = text; }
  reset() {
    this.tokens = [];
    this.seed = null;
    $(".tokens", this.root).replaceChildren();
    $(".text", this.root).textContent = "";
    const err = $(".error", this.root);
    err.hidden = true;
    err.textContent = "";
    const seed = $(".seed", this.root);
    if (seed) seed.textContent = "";
    this.state = "running";
    this.status("waiting for the first token…");
  }
  addToken(token) {
    this.tokens.push(token);
    const prob = token.logprob === null || token.logprob === undefined ? null : Math.exp(token.logprob);
    const chip = el("span", { class: token.special ? "tok special" : "tok", "data-index": String(this.tokens.length - 1) });
    chip.title = token.special ? "end of sequence" : `token id ${token.id}`;
    chip.append(el("span", { class: "tok-text" }, tokenLabel(token)));
    chip.append(el("span", { class: "tok-prob" }, prob === null ? "" : `${(100 * prob).toFixed(prob > 0.995 ? 0 : 1)}%`));
    $(".tokens", this.root).append(chip);
    this.status(`${this.tokens.length} token${this.tokens.length === 1 ? "" : "s"}…`);
  }
  finish(text, details, seedDigits) {
    $(".text", this.root).textContent = text;
    if (seedDigits !== null) {
      this.seed = seedDigits;
      const seed = $(".seed", this.root);
      if (seed) seed.textContent = `seed ${seedDigits}`;
    }
    const reason = details ? details.finish_reason : "done";
    this.status(`${this.tokens.length} tokens · ${reason.replace("_", " ")}`);
    this.state = "done";
  }
  fail(message) {
    const err = $(".error", this.root);
    err.textContent = message;
    err.hidden = false;
    this.status("failed");
    this.state = "error";
  }
}

// Stream one request into a panel; resolves to {ids, seed} or null on error.
async function streamInto(panel, inputs, parameters) {
  panel.reset();
  let resp;
  try {
    resp = await post("generate_stream", inputs, parameters);
  } catch (e) {
    panel.fail(`could not reach the server: ${e.message}`);
    return null;
  }
  if (!resp.ok) {
    panel.fail(await errorText(resp));
    return null;
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let result = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data:")) continue; // ": keep-alive" comments
        const event = JSON.parse(line.slice(5));
        if (event.error !== undefined) {
          panel.fail(`${event.error_type}: ${event.error}`); // failed mid-stream (timeout, shutdown)
          return null;
        }
        panel.addToken(event.token);
        if (event.generated_text !== null) {
          const seed = /"seed":\s*(\d+)/.exec(line);
          panel.finish(event.generated_text, event.details, seed ? seed[1] : null);
          result = { ids: panel.tokens.map((t) => t.id), seed: panel.seed };
        }
      }
    }
  }
  if (!result) panel.fail("the stream ended before its last token");
  return result;
}

// ---- the heatmap ---------------------------------------------------------------------------------
const attention = {
  root: document.getElementById("attention"),
  data: null,
  set state(s) { this.root.dataset.state = s; },
  reset(message) {
    this.data = null;
    $("#heatmap").replaceChildren();
    $(".note", this.root).textContent = message || "";
    const err = $(".error", this.root);
    err.hidden = true;
    err.textContent = "";
  },
  fail(message) {
    const err = $(".error", this.root);
    err.textContent = message;
    err.hidden = false;
    this.state = "error";
  },
  show(data, streamedIds, fromLexicon) {
    this.data = data;
    const layer = $("#layer");
    const head = $("#head");
    const keepLayer = layer.options.length === data.layers ? layer.value : String(data.layers - 1);
    const keepHead = head.options.length === data.heads + 1 ? head.value : "mean";
    layer.replaceChildren(...Array.from({ length: data.layers }, (_, i) => el("option", { value: String(i) }, `${i + 1} of ${data.layers}`)));
    head.replaceChildren(
      el("option", { value: "mean" }, "mean of heads"),
      ...Array.from({ length: data.heads }, (_, i) => el("option", { value: String(i) }, `${i + 1}`)),
    );
    layer.value = keepLayer;
    head.value = keepHead;
    const same = streamedIds && streamedIds.length === data.tokens.length && streamedIds.every((id, i) => id === data.tokens[i].id);
    $(".note", this.root).textContent = fromLexicon
      ? `The output came from the lexicon; this map shows the model's own answer. Weights from ${data.graph}.`
      : same
      ? `Same tokens as the streamed output. Weights from ${data.graph}.`
      : `Weights from ${data.graph}; this server serves the ${data.serving_variant} variant, whose tokens differ here.`;
    this.render();
    this.state = "done";
  },
  render() {
    const data = this.data;
    if (!data) return;
    const l = Number($("#layer").value);
    const h = $("#head").value;
    const matrix = h === "mean" ? data.cross_attention_mean[l] : data.cross_attentions[l][Number(h)]; // [T][S]
    const table = $("#heatmap");
    const head = el("tr");
    head.append(el("th", { class: "corner" }, "out \\ in"));
    data.source_tokens.forEach((s, j) => head.append(el("th", { class: "src", "data-col": String(j), scope: "col" }, s.token.trim() || "␣")));
    const body = el("tbody");
    data.tokens.forEach((tok, i) => {
      const row = el("tr", { "data-row": String(i) });
      const th = el("th", { class: "out", scope: "row" }, tokenLabel(tok));
      th.append(el("span", { class: "prob" }, `${(100 * tok.prob).toFixed(0)}%`));
      row.append(th);
      matrix[i].forEach((w, j) => {
        const cell = el("td", { class: w > 0.5 ? "cell dark" : "cell", "data-row": String(i), "data-col": String(j) });
        cell.dataset.weight = String(w);
        cell.title = `${tokenLabel(tok)} ← ${data.source_tokens[j].token}: ${w.toFixed(3)}`;
        cell.style.backgroundColor = `hsl(222 70% ${Math.round(100 - 62 * w)}%)`;
        cell.textContent = w >= 0.005 ? (100 * w).toFixed(0) : "";
        row.append(cell);
      });
      body.append(row);
    });
    const thead = el("thead");
    thead.append(head);
    table.replaceChildren(thead, body);
  },
};

// ---- wiring ---------------------------------------------------------------------------------------
const panels = { greedy: new Panel("greedy"), sampled: new Panel("sampled") };
const last = { inputs: null, requests: {}, streamed: {}, fromLexicon: {} }; // what the heatmap can explain

async function explainSelected() {
  const which = $("#attn-output").value;
  const request = last.requests[which];
  if (request && /\s/.test(last.inputs.trim())) {
    // running text is answered word by word; the attention map is the model's over one input
    attention.reset("The attention map shows one word at a time: enter a single word to see it.");
    attention.state = "idle";
    return;
  }
  if (!request) {
    attention.reset(`No ${which} output to explain yet.`);
    attention.state = "idle";
    return;
  }
  attention.reset(`explaining the ${which} output…`);
  attention.state = "running";
  let resp;
  try {
    resp = await post("explain", last.inputs, request);
  } catch (e) {
    attention.fail(`could not reach the server: ${e.message}`);
    return;
  }
  if (!resp.ok) {
    attention.fail(await errorText(resp));
    return;
  }
  attention.show(await resp.json(), last.streamed[which], last.fromLexicon[which]);
}

async function run(event) {
  event.preventDefault();
  const button = $("#run");
  button.disabled = true;
  try {
    const inputs = $("#inputs").value;
    const common = {};
    const maxNew = numberOrNull("#max-new-tokens");
    if (maxNew !== null) common.max_new_tokens = maxNew;
    const greedy = { ...common, do_sample: false };
    const sampled = {
      ...common,
      do_sample: true,
      temperature: numberOrNull("#temperature"),
      top_k: numberOrNull("#top-k"),
      top_p: numberOrNull("#top-p"),
      seed: textOrNull("#seed"),
    };
    attention.reset("");
    attention.state = "idle";
    const [g, s] = await Promise.all([
      streamInto(panels.greedy, inputs, { ...greedy, details: true }),
      streamInto(panels.sampled, inputs, { ...sampled, details: true }),
    ]);
    // The sampled request is explained with the seed it used, so /explain reproduces its tokens.
    last.inputs = inputs;
    last.requests = { greedy: g ? greedy : null, sampled: s ? { ...sampled, seed: s.seed } : null };
    last.streamed = { greedy: g && g.ids, sampled: s && s.ids };
    // a lexicon answer's tokens carry no probability: /explain then shows the model's own tokens
    last.fromLexicon = { greedy: g !== null && panels.greedy.tokens.some((t) => !t.special && t.logprob === null) };
    await explainSelected();
  } finally {
    button.disabled = false;
  }
}

async function showInfo() {
  try {
    const resp = await fetch("info");
    if (!resp.ok) throw new Error(await errorText(resp));
    const info = await resp.json();
    $("#model-info").textContent =
      `model ${info.model_id} · variant ${info.variant} · ${info.provider} · ` +
      `at most ${info.max_input_tokens} input and ${info.max_new_tokens} new tokens`;
  } catch (e) {
    $("#model-info").textContent = `model information unavailable: ${e.message}`;
  }
}

$("#form").addEventListener("submit", run);
$("#attn-output").addEventListener("change", explainSelected);
$("#layer").addEventListener("change", () => attention.render());
$("#head").addEventListener("change", () => attention.render());
showInfo();
