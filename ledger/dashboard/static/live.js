// coloco ledger dashboard: keeps the runs table live by polling this page's JSON.
"use strict";
(function () {
  const body = document.getElementById("runs-body");
  const stamp = document.getElementById("live-stamp");
  if (!body) return;
  const esc = (s) => String(s ?? "-").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  async function refresh() {
    try {
      const resp = await fetch("?format=json", { headers: { Accept: "application/json" } });
      if (!resp.ok) return;
      const data = await resp.json();
      const rows = [];
      for (const run of data.runs) {
        const last = run.rounds.length ? run.rounds[0] : null;
        rows.push(
          `<tr data-run="${esc(run.run_id)}"><td><a href="runs/${esc(run.run_id)}">${esc(run.name || run.run_id.slice(0, 10))}</a></td>` +
          `<td class="mono" title="${esc(run.run_id)}">${esc(run.run_id.slice(0, 10))}</td>` +
          `<td>${esc(run.last_committed)}</td><td>${esc(run.rounds.length)}</td>` +
          `<td class="state-${esc(last && last.state)}">${esc(last && last.state)}</td>` +
          `<td>${esc(last && last.members.length)}</td></tr>`
        );
      }
      body.innerHTML = rows.join("");
      if (stamp) stamp.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (err) {
      if (stamp) stamp.textContent = "not updating: " + err;
    }
  }
  setInterval(refresh, 3000);
})();
