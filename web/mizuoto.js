// Mizuoto front end (classic canvas nodes and Vue nodes, "Nodes 2.0", alike).
// - Speak nodes: a read-only summary inside the node, e.g.
//     "3.4 s of audio in 5.8 s (0.6x real time) · cpu · exact attention"
//     "Slower than real time: 1 s of audio took 1.7 s to make."
//   It is cleared when a run starts (a cached node gets its text back) and says so when the node fails.
// - Doctor: a "Mizuoto → Mizuoto Doctor" menu command (and a button in the legacy menu) that opens a
//   readable report (GET /mizuoto/doctor?format=readable) in a dialog with a title and a Close button;
//   the Doctor node shows a short summary inside the node.
// The wording functions are exported so that tests can run them under node with a stub app.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const SUMMARY_WIDGET = "mizuoto_summary";
const SPEAK_PLACEHOLDER = "Run the workflow: how long speaking took shows here.";
const CONVERT_PLACEHOLDER = "Run the workflow: how long converting took shows here.";
const DOCTOR_PLACEHOLDER = "Run this node, or open Mizuoto → Mizuoto Doctor in the menu.";

// -- wording -----------------------------------------------------------------------------------------

/** Seconds for a person: "3.4", "0.45", "12". */
export function seconds(value) {
  const x = Number(value);
  if (!Number.isFinite(x)) return "?";
  if (x >= 100) return x.toFixed(0);
  if (x >= 1) return x.toFixed(1);
  return x.toFixed(2);
}

/** How many seconds of audio one second of work makes: "0.6x", "12x" (audio / wall time). */
export function speed(audio, wall) {
  const a = Number(audio), w = Number(wall);
  if (!(a > 0) || !(w > 0)) return null;
  const x = a / w;
  if (x >= 10) return `${x.toFixed(0)}x`;
  if (x >= 0.1) return `${x.toFixed(1)}x`;
  return `${x.toFixed(2)}x`;
}

/** What ran for attention, in words: "exact attention" when each site used its exact reference. */
export function attentionWords(attention) {
  const used = Object.entries(attention?.used || {});
  if (!used.length) return "exact attention";
  if (used.length === 1) return `${used[0][0]} attention`;
  return `attention ${used.map(([name, n]) => `${name} ×${n}`).join(", ")}`;
}

/** A Speak or Convert node's run report as lines [{text, level}] (level: "info", "muted" or "warn"). */
export function runSummary(report) {
  const lines = [];
  const audio = report.audio_seconds, wall = report.wall_seconds;
  const x = speed(audio, wall);
  const attention = report.attention || {};
  lines.push({
    text: `${seconds(audio)} s of audio in ${seconds(wall)} s${x ? ` (${x} real time)` : ""}`
      + ` · ${report.device ?? "?"} · ${attentionWords(attention)}`,
    level: "info",
  });
  const rtf = Number(report.real_time_factor ?? (Number(wall) / Number(audio)));
  if (Number.isFinite(rtf) && rtf > 0) {
    const pace = rtf < 0.95 ? "Faster than real time" : rtf > 1.05 ? "Slower than real time" : "About real time";
    lines.push({ text: `${pace}: 1 s of audio took ${seconds(rtf)} s to make.`, level: "muted" });
  }
  const policy = attention.policy && !["auto", "exact"].includes(attention.policy) ? ` · policy ${attention.policy}` : "";
  lines.push({ text: `${report.engine ?? "?"} · ${report.dtype ?? "?"} · seed ${report.seed ?? "?"}${policy}`, level: "muted" });
  for (const warning of report.warnings || []) {
    if (!warning.startsWith("attention fell back")) lines.push({ text: `⚠ ${warning}`, level: "warn" });
  }
  for (const [pair, reasons] of Object.entries(attention.fallbacks || {})) {
    const why = Object.entries(reasons).map(([reason, n]) => `${reason} ×${n}`).join(", ");
    lines.push({ text: `⚠ attention fell back ${pair}: ${why}`, level: "warn" });
  }
  return lines;
}

/** The Doctor node's lines: the server's summary text, else a few facts from the JSON report. */
export function doctorSummary(summaryText, report) {
  if (summaryText) {
    return summaryText.split("\n").map((text) => ({ text, level: text.startsWith("⚠") ? "warn" : "info" }));
  }
  const gpus = report?.cuda?.devices || [];
  return [
    { text: `torch ${report?.torch ?? "?"} · ${gpus.length ? gpus.join(", ") : "CPU only (no CUDA GPU)"}`, level: "info" },
    { text: `engines: ${Object.keys(report?.engines || {}).join(", ")}`, level: "info" },
    { text: "Full report: Mizuoto → Mizuoto Doctor in the menu", level: "muted" },
  ];
}

// -- the summary inside the node ------------------------------------------------------------------------

const LINE_HEIGHT = 18;
const PADDING = 8;
const RESERVED_LINES = 3;  // room for a run's summary from the start, so a normal run does not resize the node
const COLORS = { info: "var(--input-text, #ddd)", muted: "var(--descrip-text, #999)", warn: "#e9a23b", error: "#f06464" };

function summaryElement() {
  const el = document.createElement("div");
  el.className = "mizuoto-summary";
  el.setAttribute("role", "status");
  el.style.cssText = "box-sizing:border-box;width:100%;padding:4px 6px;border-radius:6px;overflow:hidden;"
    + "font:13px/18px sans-serif;white-space:pre-wrap;overflow-wrap:anywhere;user-select:text;cursor:text;"
    + "background:var(--comfy-input-bg, rgba(0,0,0,.25));color:var(--input-text, #ddd)";
  return el;
}

function addSummaryWidget(node, placeholder) {
  const el = summaryElement();
  const state = { lines: null, placeholder };
  const widget = node.addDOMWidget(SUMMARY_WIDGET, "mizuoto_summary", el, {
    serialize: false,  // neither in the saved workflow nor in the prompt
    hideOnZoom: false,
    getValue: () => (state.lines || []).map((l) => l.text).join("\n"),
    setValue: () => {},  // read-only: only a run sets it
    getMinHeight: () => state.height || RESERVED_LINES * LINE_HEIGHT + 2 * PADDING,
  });
  widget.serialize = false;
  node.mizuotoSummary = { widget, el, state };
  renderSummary(node);
  return widget;
}

function renderSummary(node) {
  const summary = node.mizuotoSummary;
  if (!summary) return;
  const { el, state } = summary;
  const lines = state.lines?.length ? state.lines : [{ text: state.placeholder, level: "muted" }];
  el.replaceChildren(...lines.map((line) => {
    const div = document.createElement("div");
    div.textContent = line.text;
    div.style.color = COLORS[line.level] || COLORS.info;
    if (line.level === "muted" && !state.lines?.length) div.style.fontStyle = "italic";
    return div;
  }));
  el.dataset.state = state.lines?.length ? "report" : "empty";
  // The text's height in canvas units: its lines (wrapped ones counted when the element is laid out).
  const content = el.isConnected ? [...el.children].reduce((h, c) => h + (c.offsetHeight || 0), 0) + PADDING : 0;
  // The DOM widget draws its element inside a margin (10 by default) above and below.
  const margin = 2 * (Number(summary.widget?.margin) || 10);
  state.height = Math.max(Math.max(RESERVED_LINES, lines.length) * LINE_HEIGHT + 2 * PADDING, Math.ceil(content)) + margin;
  // Grow the node when the text needs more room (classic canvas; Vue nodes size themselves). Node sizes
  // are typed arrays in litegraph, not Arrays.
  if (typeof node.computeSize === "function" && node.size?.length >= 2) {
    const min = node.computeSize();
    if (min[1] > node.size[1] || min[0] > node.size[0]) {
      node.setSize?.([Math.max(node.size[0], min[0]), Math.max(node.size[1], min[1])]);
    }
  }
  node.setDirtyCanvas?.(true, true);
}

/** Set (or, with null, clear) the lines a node shows. */
export function setSummary(node, lines) {
  if (!node.mizuotoSummary) return;
  node.mizuotoSummary.state.lines = lines;
  renderSummary(node);
}

// Every live Speak, Convert or Doctor node, for the run events (which name nodes by id).
const liveNodes = new Set();

function byId(id) {
  for (const node of liveNodes) if (String(node.id) === String(id)) return node;
  return null;
}

/** A run starts: no node keeps a previous run's text (a cached node gets its own back). */
export function onRunStart() {
  for (const node of liveNodes) {
    const state = node.mizuotoSummary?.state;
    if (!state) continue;
    node.mizuotoPrevious = state.lines;
    setSummary(node, null);
  }
}

/** Nodes the run took from the cache: their previous text still describes their output. */
export function onRunCached(ids) {
  for (const id of ids || []) {
    const node = byId(id);
    if (node?.mizuotoPrevious) setSummary(node, node.mizuotoPrevious);
  }
}

/** A node starts executing: say so. */
export function onNodeRunning(id) {
  const node = byId(id);
  if (node && node.mizuotoKind === "speak") setSummary(node, [{ text: "Speaking…", level: "muted" }]);
  else if (node && node.mizuotoKind === "convert") setSummary(node, [{ text: "Converting…", level: "muted" }]);
  else if (node) setSummary(node, [{ text: "Examining this machine…", level: "muted" }]);
}

/** The run failed or was stopped: the failing node says so; nothing else keeps an old report. */
export function onRunFailed(detail, stopped) {
  for (const node of liveNodes) {
    const lines = node.mizuotoSummary?.state.lines;
    if (lines && lines.length === 1 && lines[0].level === "muted" && lines[0].text.endsWith("…")) setSummary(node, null);
  }
  const node = detail?.node_id != null ? byId(detail.node_id) : null;
  if (!node) return;
  const message = stopped ? "Stopped before it finished." : `Failed: ${detail.exception_message?.trim() || "see the error"}`;
  setSummary(node, [{ text: message, level: stopped ? "warn" : "error" }]);
}

// -- the Doctor dialog --------------------------------------------------------------------------------------

const DIALOG_CSS = `
dialog.mizuoto-doctor{width:min(880px,92vw);max-height:86vh;padding:0;border:1px solid var(--border-color,#555);
  border-radius:8px;background:var(--comfy-menu-bg,#202020);color:var(--fg-color,#eee);font:14px/1.45 sans-serif;
  display:flex;flex-direction:column;overflow:hidden}
dialog.mizuoto-doctor:not([open]){display:none}
dialog.mizuoto-doctor::backdrop{background:rgba(0,0,0,.55)}
.mizuoto-doctor header{display:flex;align-items:center;gap:8px;padding:10px 14px;border-bottom:1px solid var(--border-color,#555)}
.mizuoto-doctor header h2{flex:1;margin:0;font-size:17px;font-weight:600}
.mizuoto-doctor button{font:inherit;color:inherit;background:var(--comfy-input-bg,#333);border:1px solid var(--border-color,#555);
  border-radius:6px;padding:4px 12px;cursor:pointer}
.mizuoto-doctor button:hover{filter:brightness(1.25)}
.mizuoto-doctor header button.close{font-size:18px;line-height:1;padding:2px 9px}
.mizuoto-doctor .body{overflow:auto;padding:4px 16px 12px;user-select:text}
.mizuoto-doctor h3{margin:14px 0 6px;font-size:15px;font-weight:600}
.mizuoto-doctor ul{margin:0;padding:0;list-style:none}
.mizuoto-doctor li{margin:2px 0}
.mizuoto-doctor li.indent{margin-left:20px}
.mizuoto-doctor li.ok::before{content:"✓ ";color:#5fbf6f}
.mizuoto-doctor li.warn{color:#e9a23b}
.mizuoto-doctor li.muted{color:var(--descrip-text,#aaa)}
.mizuoto-doctor code{display:block;margin:2px 0 4px 20px;padding:3px 8px;border-radius:4px;white-space:pre-wrap;
  overflow-wrap:anywhere;background:var(--comfy-input-bg,#111);color:var(--input-text,#ddd);font:12.5px monospace;user-select:all}
.mizuoto-doctor footer{display:flex;justify-content:flex-end;gap:8px;padding:10px 14px;border-top:1px solid var(--border-color,#555)}
`;

function ensureStyle() {
  if (document.getElementById("mizuoto-doctor-style")) return;
  const style = document.createElement("style");
  style.id = "mizuoto-doctor-style";
  style.textContent = DIALOG_CSS;
  document.head.appendChild(style);
}

function button(text, onclick, className) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  if (className) b.className = className;
  b.addEventListener("click", onclick);
  return b;
}

function renderSections(body, sections) {
  body.replaceChildren();
  for (const section of sections) {
    const h3 = document.createElement("h3");
    h3.textContent = section.title;
    const ul = document.createElement("ul");
    for (const item of section.items) {
      const li = document.createElement("li");
      li.className = `${item.level || "info"}${item.indent ? " indent" : ""}`;
      li.append(item.text);
      if (item.code) {
        const code = document.createElement("code");
        code.textContent = item.code;
        li.append(code);
      }
      ul.appendChild(li);
    }
    const div = document.createElement("section");
    div.append(h3, ul);
    body.appendChild(div);
  }
}

let openDialog = null;

async function showDoctor() {
  if (openDialog) return;  // one dialog (and one request, about 2-10 s) at a time
  ensureStyle();
  const dialog = document.createElement("dialog");
  dialog.className = "mizuoto-doctor";
  dialog.setAttribute("aria-labelledby", "mizuoto-doctor-title");
  const header = document.createElement("header");
  const title = document.createElement("h2");
  title.id = "mizuoto-doctor-title";
  title.textContent = "Mizuoto Doctor";
  const close = () => dialog.close();
  const closeX = button("×", close, "close");
  closeX.title = "Close";
  closeX.setAttribute("aria-label", "Close");
  header.append(title, closeX);
  const body = document.createElement("div");
  body.className = "body";
  body.textContent = "Examining this machine (torch, GPUs, attention kernels, models)… this takes a few seconds.";
  const footer = document.createElement("footer");
  let answer = null;
  const copy = (what) => () => {
    if (!answer) return;
    const text = what === "json" ? JSON.stringify(answer.report, null, 2) : answer.text;
    navigator.clipboard?.writeText(text).catch(() => {});
  };
  footer.append(button("Copy as text", copy("text")), button("Copy JSON", copy("json")), button("Close", close, "close-footer"));
  dialog.append(header, body, footer);
  // Close on a click on the backdrop (the text stays selectable), on Escape and with the buttons: ComfyUI's
  // keybinding handler calls preventDefault on Escape, which stops <dialog>'s own cancel.
  dialog.addEventListener("click", (e) => { if (e.target === dialog) close(); });
  dialog.addEventListener("keydown", (e) => {
    if (e.key === "Escape") { e.stopPropagation(); close(); }
  });
  dialog.addEventListener("close", () => { dialog.remove(); openDialog = null; });
  document.body.appendChild(dialog);
  openDialog = dialog;
  dialog.showModal();
  try {
    const response = await api.fetchApi("/mizuoto/doctor?format=readable");
    if (!response.ok) throw new Error(`the server answered ${response.status}`);
    answer = await response.json();
    title.textContent = `${answer.title || "Mizuoto Doctor"} · Mizuoto ${answer.report?.mizuoto ?? ""}`.trim();
    renderSections(body, answer.sections || []);
    dialog.dataset.state = "report";
  } catch (error) {
    body.textContent = `The doctor could not run: ${error}`;
    dialog.dataset.state = "error";
  }
}

// -- the extension ------------------------------------------------------------------------------------------

app.registerExtension({
  name: "mizuoto",
  commands: [{ id: "mizuoto.doctor", label: "Mizuoto Doctor", icon: "pi pi-heart", function: showDoctor }],
  menuCommands: [{ path: ["Mizuoto"], commands: ["mizuoto.doctor"] }],
  async setup() {
    // The legacy menu has no command API: add a plain button there.
    const legacy = app.ui?.menuContainer;
    if (legacy && !app.extensionManager) {
      const b = document.createElement("button");
      b.textContent = "Mizuoto Doctor";
      b.onclick = showDoctor;
      legacy.appendChild(b);
    }
    api.addEventListener("execution_start", () => onRunStart());
    api.addEventListener("execution_cached", (e) => onRunCached(e.detail?.nodes));
    api.addEventListener("executing", (e) => {
      const id = e.detail && typeof e.detail === "object" ? e.detail.node ?? e.detail.display_node : e.detail;
      if (id != null) onNodeRunning(id);
    });
    api.addEventListener("execution_error", (e) => onRunFailed(e.detail, false));
    api.addEventListener("execution_interrupted", (e) => onRunFailed(e.detail, true));
  },
  async beforeRegisterNodeDef(nodeType, nodeData) {
    // Speak and Convert nodes both return audio with a run report: the same summary.
    const audioKind = !nodeData.name.startsWith("Mizuoto") ? null
      : nodeData.name.endsWith("Speak") ? "speak" : nodeData.name.endsWith("Convert") ? "convert" : null;
    const isSpeak = audioKind !== null;
    const isDoctor = nodeData.name === "MizuotoDoctor";
    if (!isSpeak && !isDoctor) return;

    const onNodeCreated = nodeType.prototype.onNodeCreated;
    nodeType.prototype.onNodeCreated = function () {
      const result = onNodeCreated?.apply(this, arguments);
      this.mizuotoKind = audioKind ?? "doctor";
      addSummaryWidget(this, { speak: SPEAK_PLACEHOLDER, convert: CONVERT_PLACEHOLDER }[audioKind] ?? DOCTOR_PLACEHOLDER);
      if (isDoctor && this.size?.length >= 2) {
        // Wide enough for its title and its lines.
        this.setSize?.([Math.max(this.size[0], 420), this.size[1]]);
      }
      liveNodes.add(this);
      return result;
    };
    const onRemoved = nodeType.prototype.onRemoved;
    nodeType.prototype.onRemoved = function () {
      liveNodes.delete(this);
      return onRemoved?.apply(this, arguments);
    };
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      onExecuted?.apply(this, arguments);
      const text = (isSpeak ? message?.report : message?.text)?.[0];
      let lines = null;  // never leave a previous run's summary on the node
      if (text) {
        try {
          const report = JSON.parse(text);
          lines = isSpeak ? runSummary(report) : doctorSummary(message?.summary?.[0], report);
        } catch {
          lines = [{ text: "The run report could not be read.", level: "warn" }];
        }
      }
      this.mizuotoPrevious = lines;
      setSummary(this, lines);
    };
  },
});
