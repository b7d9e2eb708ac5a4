// Mizuoto front end.
// - Speak nodes: after a run, a summary of the run report drawn under the node (policy, backends with
//   counts, fallbacks as a warning, real-time factor, seconds of audio).
// - Doctor: a "Mizuoto → Doctor" menu command (and a button in the legacy menu) that shows
//   GET /mizuoto/doctor; the Doctor node shows its report on the node too.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

function summary(report) {
  const attention = report.attention || {};
  const used = attention.used
    ? Object.entries(attention.used).map(([k, n]) => `${k} ×${n}`).join(", ")
    : "each site's exact reference";
  const lines = [
    `${report.engine} · ${report.device} · ${report.dtype} · seed ${report.seed}`,
    `${report.audio_seconds}s of audio in ${report.wall_seconds}s (RTF ${report.real_time_factor})`,
    `attention ${attention.policy}: ${used}`,
  ];
  // Fallbacks get their own lines below; other warnings show as they are.
  for (const warning of report.warnings || []) {
    if (!warning.startsWith("attention fell back")) lines.push(`⚠ ${warning}`);
  }
  for (const [pair, reasons] of Object.entries(attention.fallbacks || {})) {
    lines.push(`⚠ fell back ${pair}: ${Object.entries(reasons).map(([r, n]) => `${r} ×${n}`).join(", ")}`);
  }
  return lines;
}

function drawLines(node, ctx, lines) {
  if (!lines || node.flags?.collapsed) return;
  ctx.save();
  ctx.font = "11px sans-serif";
  lines.forEach((line, i) => {
    ctx.fillStyle = line.startsWith("⚠") ? "#e9a23b" : "#9ab";
    ctx.fillText(line, 8, node.size[1] + 14 + 13 * i);
  });
  ctx.restore();
}

let doctorPending = false;

async function showDoctor() {
  if (doctorPending) return;  // one request (about 2 s) and one dialog at a time
  doctorPending = true;
  let text;
  try {
    const response = await api.fetchApi("/mizuoto/doctor");
    text = response.ok ? JSON.stringify(await response.json(), null, 2) : `doctor failed: ${response.status}`;
  } catch (error) {
    text = `doctor failed: ${error}`;
  } finally {
    doctorPending = false;
  }
  const dialog = document.createElement("dialog");
  dialog.style.cssText = "max-width:80vw;max-height:80vh;overflow:auto;padding:0";
  const pre = document.createElement("pre");
  pre.style.cssText = "margin:0;padding:12px;font:12px monospace;user-select:text";
  pre.textContent = text;
  dialog.appendChild(pre);
  // Close on a click on the backdrop only (the text stays selectable), and on Escape: ComfyUI's
  // keybinding handler calls preventDefault on Escape, which stops <dialog>'s own cancel.
  dialog.addEventListener("click", (e) => { if (e.target === dialog) dialog.close(); });
  dialog.addEventListener("keydown", (e) => {
    if (e.key === "Escape") { e.stopPropagation(); dialog.close(); }
  });
  dialog.addEventListener("close", () => dialog.remove());
  document.body.appendChild(dialog);
  dialog.showModal();
}

app.registerExtension({
  name: "mizuoto",
  commands: [{ id: "mizuoto.doctor", label: "Mizuoto Doctor", function: showDoctor }],
  menuCommands: [{ path: ["Mizuoto"], commands: ["mizuoto.doctor"] }],
  async setup() {
    // The legacy menu has no command API: add a plain button there.
    const legacy = app.ui?.menuContainer;
    if (legacy && !app.extensionManager) {
      const button = document.createElement("button");
      button.textContent = "Mizuoto Doctor";
      button.onclick = showDoctor;
      legacy.appendChild(button);
    }
  },
  async beforeRegisterNodeDef(nodeType, nodeData) {
    const isSpeak = nodeData.name.startsWith("Mizuoto") && nodeData.name.endsWith("Speak");
    const isDoctor = nodeData.name === "MizuotoDoctor";
    if (!isSpeak && !isDoctor) return;
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      onExecuted?.apply(this, arguments);
      this.mizuotoLines = null;  // never leave a previous run's summary on the node
      const text = (isSpeak ? message?.report : message?.text)?.[0];
      if (!text) return;
      try {
        const report = JSON.parse(text);
        this.mizuotoLines = isSpeak
          ? summary(report)
          : [`torch ${report.torch}`, `CUDA: ${(report.cuda?.devices || []).join(", ") || "none"}`,
             `engines: ${Object.keys(report.engines || {}).join(", ")}`];
      } catch {
        return;
      }
      this.setDirtyCanvas(true, true);
    };
    const onDrawForeground = nodeType.prototype.onDrawForeground;
    nodeType.prototype.onDrawForeground = function (ctx) {
      onDrawForeground?.apply(this, arguments);
      drawLines(this, ctx, this.mizuotoLines);
    };
  },
});
