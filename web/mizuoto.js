// Mizuoto front end: after a speak node runs, show a one-line summary of its run report on the node.
import { app } from "../../scripts/app.js";

function summary(report) {
  const attention = report.attention || {};
  const used = attention.used ? Object.entries(attention.used).map(([k, n]) => `${k} ${n}`).join(", ") : "reference";
  const parts = [
    `${report.engine} · ${report.device} · ${report.dtype}`,
    `${report.audio_seconds}s audio in ${report.wall_seconds}s (RTF ${report.real_time_factor})`,
    `attention ${attention.policy}: ${used}`,
  ];
  if (attention.fallbacks) parts.push(`⚠ fallbacks: ${JSON.stringify(attention.fallbacks)}`);
  return parts.join("\n");
}

app.registerExtension({
  name: "mizuoto.report",
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (!nodeData.name.startsWith("Mizuoto") || !nodeData.name.endsWith("Speak")) return;
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      onExecuted?.apply(this, arguments);
      const text = message?.report?.[0];
      if (!text) return;
      let report;
      try { report = JSON.parse(text); } catch { return; }
      this.mizuotoSummary = summary(report);
      this.setDirtyCanvas(true, true);
    };
    const onDrawForeground = nodeType.prototype.onDrawForeground;
    nodeType.prototype.onDrawForeground = function (ctx) {
      onDrawForeground?.apply(this, arguments);
      if (!this.mizuotoSummary || this.flags?.collapsed) return;
      ctx.save();
      ctx.font = "11px sans-serif";
      ctx.fillStyle = "#9ab";
      this.mizuotoSummary.split("\n").forEach((line, i) => ctx.fillText(line, 8, this.size[1] + 14 + 13 * i));
      ctx.restore();
    };
  },
});
