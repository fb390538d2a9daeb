// streamgate console: hash routes, one JSON poll per view every POLL_MS, no framework.
"use strict";

const POLL_MS = 2000;
const PAGE = 100;
const view = document.getElementById("view");
const statusLine = document.getElementById("status");
let timer = null;
let generation = 0; // a poll started for an older route draws nothing
const previous = new Map(); // topic -> {t, bytesIn, bytesOut} for client-side rates

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function bytes(n) {
  if (n === null || n === undefined || n < 0) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function seconds(value) {
  return value === null || value === undefined ? "–" : `${value.toFixed(2)} s`;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

async function getJSON(path) {
  const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(`${response.status}: ${body.error || response.statusText}`);
  return body;
}

function setStatus(text, error) {
  statusLine.textContent = text;
  statusLine.className = error ? "status error" : "status";
}

// --- routing ---------------------------------------------------------------------------

const routes = [
  [/^#\/topics$/, topicsView],
  [/^#\/topic\/(.+)$/, topicView],
  [/^#\/groups$/, groupsView],
  [/^#\/group\/(.+)$/, groupView],
  [/^#\/nodes$/, nodesView],
  [/^#\/gateway$/, gatewayView],
];

function route() {
  const hash = location.hash || "#/topics";
  generation++;
  clearTimeout(timer);
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("active", hash.startsWith(`#/${link.dataset.view.replace(/s$/, "")}`));
  }
  for (const [pattern, render] of routes) {
    const match = hash.match(pattern);
    if (match) {
      render(...match.slice(1).map(decodeURIComponent));
      return;
    }
  }
  location.hash = "#/topics";
}

// Render `skeleton` once, then call `refresh(area)` now and every POLL_MS while the route stays.
function polled(skeleton, refresh) {
  const mine = generation;
  view.innerHTML = skeleton;
  const area = view.querySelector(".area");
  const tick = async () => {
    if (mine !== generation) return;
    try {
      await refresh(area, () => mine === generation);
      setStatus(`updated ${clock(Date.now())}`, false);
    } catch (error) {
      setStatus(String(error.message || error), true);
    }
    if (mine === generation) timer = setTimeout(tick, POLL_MS);
  };
  tick();
}

function pager(state, total, redraw) {
  const last = Math.max(0, Math.ceil(total / PAGE) - 1);
  const page = Math.floor(state.offset / PAGE);
  return {
    html: `<button data-go="prev" ${page <= 0 ? "disabled" : ""}>‹ previous</button>
      <span class="muted">page ${page + 1} of ${last + 1} · ${total} in all</span>
      <button data-go="next" ${page >= last ? "disabled" : ""}>next ›</button>`,
    bind(element) {
      element.querySelectorAll("button[data-go]").forEach((b) => b.addEventListener("click", () => {
        state.offset = Math.max(0, Math.min(last * PAGE, state.offset + (b.dataset.go === "next" ? PAGE : -PAGE)));
        redraw();
      }));
    },
  };
}

// --- topics ----------------------------------------------------------------------------

function topicsView() {
  const state = { offset: 0, q: "" };
  polled(`<h1>Topics</h1>
    <div class="pager"><input id="topic-filter" placeholder="filter topics" autocomplete="off">
    <span class="pages"></span></div><div class="area"></div>`, async function refresh(area, current) {
    const data = await getJSON(`/api/topics?offset=${state.offset}&limit=${PAGE}&q=${encodeURIComponent(state.q)}`);
    if (!current()) return;
    const now = Date.now();
    const rows = data.topics.map((t) => {
      const before = previous.get(t.topic);
      previous.set(t.topic, { t: now, bytesIn: t.bytes_in, bytesOut: t.bytes_out });
      const seconds = before ? (now - before.t) / 1000 : 0;
      const rateIn = seconds > 0 ? (t.bytes_in - before.bytesIn) / seconds : null;
      const rateOut = seconds > 0 ? (t.bytes_out - before.bytesOut) / seconds : null;
      return `<tr data-topic="${esc(t.topic)}">
        <td><a href="#/topic/${encodeURIComponent(t.topic)}">${esc(t.topic)}</a></td>
        <td class="num">${t.partitions}</td><td class="num">${t.epoch}</td>
        <td class="num">${t.open_segments}</td>
        <td class="num">${bytes(t.tier1_bytes)}</td><td class="num">${bytes(t.tier2_bytes)}</td>
        <td class="num">${rateIn === null ? "–" : bytes(rateIn) + "/s"}</td>
        <td class="num">${rateOut === null ? "–" : bytes(rateOut) + "/s"}</td></tr>`;
    }).join("");
    area.innerHTML = `<table id="topics"><thead><tr><th>topic</th><th class="num">partitions</th>
      <th class="num">epoch</th><th class="num">open segments</th>
      <th class="num">tier 1 (not yet in tier 2)</th><th class="num">tier 2</th>
      <th class="num">produce</th><th class="num">fetch</th></tr></thead>
      <tbody>${rows || `<tr><td colspan="8" class="muted">no topics</td></tr>`}</tbody></table>`;
    const pages = pager(state, data.total, () => refresh(area, current));
    const slot = view.querySelector(".pages");
    slot.innerHTML = pages.html;
    pages.bind(slot);
  });
  const filter = document.getElementById("topic-filter");
  filter.addEventListener("input", () => { state.q = filter.value; state.offset = 0; });
}

// --- one topic: its stream over time ---------------------------------------------------

function hue(id) { return (id * 67) % 360; }

// windowMs: show only the last windowMs (0: everything this process recorded)
function picture(history, windowMs) {
  const W = 960, H = 320, left = 64, right = 12, top = 10, bottom = 28;
  const first = Math.min(history.since_ms, ...history.segments.map((s) => s.opened_ms));
  const start = windowMs > 0 ? Math.max(first, history.now_ms - windowMs) : first;
  const end = Math.max(history.now_ms, start + 1000);
  const x = (ms) => left + ((ms - start) / (end - start)) * (W - left - right);
  const parts = Math.max(1, history.partitions);
  const y = (p) => top + (p / parts) * (H - top - bottom);
  const out = [`<svg id="stream-picture" viewBox="0 0 ${W} ${H}" role="img"
    aria-label="segments of ${esc(history.topic)} over time">`];
  // partition labels in the middle of their rows; at most ~16 of them
  for (let p = 0; p < parts; p += Math.max(1, Math.ceil(parts / 16))) {
    out.push(`<text x="${left - 6}" y="${(y(p) + y(p + 1)) / 2 + 4}" text-anchor="end">${p}</text>`);
  }
  out.push(`<text x="12" y="${(top + H - bottom) / 2}" transform="rotate(-90 12 ${(top + H - bottom) / 2})"
    text-anchor="middle">partition</text>`);
  // a short span shows tenths of a second, or two ticks would read the same
  const fine = end - start < 10000;
  for (let i = 0; i <= 4; i++) {
    const ms = start + ((end - start) * i) / 4;
    const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
    const label = fine ? `${clock(ms)}.${Math.floor((ms % 1000) / 100)}` : clock(ms);
    out.push(`<text x="${x(ms)}" y="${H - 8}" text-anchor="${anchor}">${label}</text>`);
  }
  for (const s of history.segments) {
    if (s.sealed_ms !== null && s.sealed_ms < start) continue;
    const x0 = x(Math.max(s.opened_ms, start)), x1 = x(s.sealed_ms ?? history.now_ms);
    const light = s.state === "open" ? 52 : 74;
    out.push(`<rect class="seg ${s.state}" data-segment-id="${s.segment_id}" data-state="${s.state}"
      data-first="${s.first_partition}" data-last="${s.last_partition}"
      x="${x0.toFixed(1)}" y="${y(s.first_partition).toFixed(1)}"
      width="${Math.max(1, x1 - x0).toFixed(1)}" height="${(y(s.last_partition + 1) - y(s.first_partition)).toFixed(1)}"
      fill="hsl(${hue(s.segment_id)} 55% ${light}%)"><title>segment ${s.segment_id} · partitions ${s.first_partition}–${s.last_partition} · epoch ${s.epoch} · ${s.state}
opened ${clock(s.opened_ms)}: ${esc(s.cause)}${s.sealed_ms ? `\nsealed ${clock(s.sealed_ms)}` : ""}</title></rect>`);
    if (x1 - x0 > 28 && y(s.last_partition + 1) - y(s.first_partition) > 14) {
      out.push(`<text x="${x0 + 4}" y="${y(s.first_partition) + 13}" pointer-events="none">${s.segment_id}</text>`);
    }
  }
  for (const e of history.events.filter((event) => event.time_ms >= start)) {
    out.push(`<g class="event" data-kind="${esc(e.kind)}"><line x1="${x(e.time_ms)}" x2="${x(e.time_ms)}"
      y1="${top}" y2="${H - bottom}"/><title>${esc(e.kind)} at ${clock(e.time_ms)}, epoch ${e.epoch}: sealed ${e.sealed.join(", ")}, opened ${e.opened.join(", ")}
cause: ${esc(e.cause)}</title></g>`);
  }
  out.push("</svg>");
  return out.join("");
}

function topicView(topic) {
  const path = encodeURIComponent(topic);
  polled(`<h1>Topic ${esc(topic)}</h1><label class="muted">picture shows
    <select id="picture-window"><option value="0">everything since the gateway started</option>
    <option value="300000">the last 5 minutes</option><option value="3600000">the last hour</option>
    </select></label><div class="area"></div>`, async (area, current) => {
    const windowMs = Number(document.getElementById("picture-window").value);
    const [history, stream] = await Promise.all([
      getJSON(`/streams/${path}/history`), getJSON(`/streams/${path}`)]);
    if (!current()) return;
    const open = stream.segments.filter((s) => s.state === "open");
    const events = history.events.slice().reverse().map((e) => `<tr class="scale-event" data-kind="${esc(e.kind)}">
      <td>${clock(e.time_ms)}</td><td>${esc(e.kind)}</td><td class="num">${e.epoch}</td>
      <td>${e.sealed.join(", ")} → ${e.opened.join(", ")}</td><td>${esc(e.cause)}</td></tr>`).join("");
    area.innerHTML = `<dl class="kv"><dt>partitions</dt><dd>${stream.partitions}</dd>
      <dt>epoch</dt><dd id="topic-epoch">${stream.epoch}</dd>
      <dt>open segments</dt><dd id="topic-open">${stream.open_segments}</dd>
      <dt>policy</dt><dd>${esc(stream.policy.policy)}${stream.policy.policy === "fixed" ? " (scaled only by hand)"
        : ` (target ${stream.policy.target_rate}, factor ${stream.policy.scale_factor}, min ${stream.policy.min_segments})`}</dd>
      <dt>scale events</dt><dd>${stream.scale_events.split} splits, ${stream.scale_events.merge} merges</dd></dl>
      <h2>Segments over time</h2>
      <div class="picture">${picture(history, windowMs)}
      <div class="legend">time → · virtual partitions ↓ · each band is a segment (outlined: open); dashed lines are scale events (hover for the cause)</div></div>
      <h2>Open segments</h2><table><thead><tr><th>segment</th><th>partitions</th><th class="num">epoch</th>
      <th>node</th><th class="num">size</th><th class="num">KiB/s</th><th class="num">events/s</th></tr></thead><tbody>
      ${open.map((s) => `<tr><td>${s.segment_id}</td><td>${s.first_partition}–${s.last_partition}</td>
        <td class="num">${s.epoch}</td><td>${s.node ?? "–"}</td><td class="num">${bytes(s.size_bytes)}</td>
        <td class="num">${s.rate_kib_per_s.toFixed(1)}</td><td class="num">${s.rate_events_per_s.toFixed(1)}</td></tr>`).join("")}</tbody></table>
      <h2>Scale events</h2><table><thead><tr><th>time</th><th>kind</th><th class="num">epoch</th>
      <th>sealed → opened</th><th>cause</th></tr></thead><tbody>
      ${events || `<tr><td colspan="5" class="muted">none since ${clock(history.since_ms)}</td></tr>`}</tbody></table>`;
  });
}

// --- consumer groups -------------------------------------------------------------------

function lagCell(lag) {
  if (lag === null || lag < 0) return `<td class="num muted">–</td>`;
  return `<td class="num ${lag === 0 ? "lag-zero" : "lag-some"}">${lag}</td>`;
}

function groupsView() {
  const state = { offset: 0 };
  polled(`<h1>Consumer groups</h1><div class="pager pages"></div><div class="area"></div>`, async function refresh(area, current) {
    const data = await getJSON(`/api/groups?offset=${state.offset}&limit=${PAGE}`);
    if (!current()) return;
    area.innerHTML = `<table id="groups"><thead><tr><th>group</th><th>type</th><th>state</th><th>protocol</th>
      <th class="num">members</th><th class="num">lag</th></tr></thead><tbody>
      ${data.groups.map((g) => `<tr data-group="${esc(g.group_id)}" data-type="${esc(g.type)}"><td><a href="#/group/${encodeURIComponent(g.group_id)}">${esc(g.group_id)}</a></td>
        <td><span class="kind kind-${esc(g.type)}">${esc(g.type)}</span></td>
        <td>${esc(g.state)}</td><td>${esc(g.protocol_type ?? "–")}</td><td class="num">${g.members}</td>${lagCell(g.lag)}</tr>`).join("")
        || `<tr><td colspan="6" class="muted">no groups</td></tr>`}</tbody></table>`;
    const pages = pager(state, data.total, () => refresh(area, current));
    const slot = view.querySelector(".pages");
    slot.innerHTML = pages.html;
    pages.bind(slot);
  });
}

function assignmentText(assignment) {
  return Object.entries(assignment || {}).map(([t, ps]) => `${esc(t)}: ${ps.join(", ")}`).join("; ") || "–";
}

function membersTable(g) {
  const consumer = g.type === "consumer", share = g.type === "share";
  const epochHead = consumer || share ? `<th class="num">member epoch</th>` : "";
  const stateHead = consumer ? "<th>member state</th>" : "";
  return `<h2>Members</h2><table id="members"><thead><tr><th>member</th><th>client</th><th>host</th>
    ${epochHead}${stateHead}<th>assignment</th></tr></thead><tbody>
    ${g.members.map((m) => `<tr data-member="${esc(m.member_id)}"><td>${esc(m.member_id)}</td><td>${esc(m.client_id)}</td>
      <td>${esc(String(m.client_host || "").replace(/^\//, ""))}</td>
      ${epochHead ? `<td class="num">${m.member_epoch}</td>` : ""}
      ${stateHead ? `<td>${esc(m.member_state)}${Object.keys(m.revoking || {}).length ? ` (revoking ${assignmentText(m.revoking)})` : ""}</td>` : ""}
      <td>${assignmentText(m.assignment)}</td></tr>`).join("")
      || `<tr><td colspan="6" class="muted">no members</td></tr>`}</tbody></table>`;
}

function offsetsTable(g) {
  return `<h2>Committed offsets</h2><table id="offsets"><thead><tr><th>topic</th><th class="num">partition</th>
    <th class="num">committed</th><th class="num">end</th><th class="num">lag</th><th>member</th></tr></thead><tbody>
    ${g.offsets.map((o) => `<tr><td>${esc(o.topic)}</td><td class="num">${o.partition}</td><td class="num">${o.committed ?? "–"}</td>
      <td class="num">${o.end ?? "–"}</td>${lagCell(o.lag)}<td class="muted">${esc(o.member ?? "–")}</td></tr>`).join("")
      || `<tr><td colspan="6" class="muted">no committed offsets</td></tr>`}</tbody></table>`;
}

function sharePartitionsTable(g) {
  return `<h2>Share partitions</h2><p class="muted">Records before the start are done (acknowledged or
    archived); those from the start to the end were handed out and some are still in flight; the lag counts
    from the start to the partition's end (high watermark).</p>
    <table id="share-partitions"><thead><tr><th>topic</th><th class="num">partition</th>
    <th class="num">start</th><th class="num">end</th><th class="num">high watermark</th><th class="num">lag</th>
    <th class="num">in flight</th><th class="num">acquired</th><th class="num">available again</th><th>members</th></tr></thead><tbody>
    ${g.share_partitions.map((p) => `<tr><td>${esc(p.topic)}</td><td class="num">${p.partition}</td>
      <td class="num">${p.start ?? "–"}</td><td class="num">${p.end ?? "–"}</td><td class="num">${p.high_watermark ?? "–"}</td>
      ${lagCell(p.lag)}<td class="num">${p.in_flight}</td><td class="num">${p.acquired}</td><td class="num">${p.available}</td>
      <td class="muted">${p.members.length}</td></tr>`).join("")
      || `<tr><td colspan="10" class="muted">nothing read yet</td></tr>`}</tbody></table>`;
}

function groupView(group) {
  polled(`<h1>Group ${esc(group)}</h1><div class="area"></div>`, async (area, current) => {
    const g = await getJSON(`/api/groups/${encodeURIComponent(group)}`);
    if (!current()) return;
    const share = g.type === "share";
    const rows = share ? g.share_partitions : g.offsets;
    const total = rows.reduce((sum, o) => sum + Math.max(0, o.lag ?? 0), 0);
    const uncommitted = share ? 0 : g.offsets.filter((o) => o.committed === null).length;
    const protocol = g.type === "consumer" ? `consumer group protocol, assignor ${esc(g.protocol)}`
      : share ? "share group" : `${esc(g.protocol_type ?? "–")} / ${esc(g.protocol ?? "–")}`;
    area.innerHTML = `<dl class="kv"><dt>type</dt><dd id="group-type"><span class="kind kind-${esc(g.type)}">${esc(g.type)}</span></dd>
      <dt>state</dt><dd>${esc(g.state)}</dd>
      <dt>protocol</dt><dd>${protocol}</dd>
      <dt>${g.type === "classic" ? "generation" : "group epoch"}</dt><dd>${g.generation}${g.type === "consumer"
        ? ` <span class="muted">(assignment epoch ${g.assignment_epoch})</span>` : ""}</dd>
      <dt>total lag</dt><dd><span id="group-lag" data-lag="${total}" class="${total === 0 ? "lag-zero" : "lag-some"}">${total}</span>
        ${uncommitted ? `<span class="muted">(${uncommitted} assigned partitions have no committed offset yet)</span>` : ""}</dd></dl>
      ${membersTable(g)}${share ? sharePartitionsTable(g) : offsetsTable(g)}`;
  });
}

// --- nodes -----------------------------------------------------------------------------

function leaseText(n) {
  if (n.lease_expires_in_s === null || n.lease_expires_in_s === undefined) return "–";
  const left = n.lease_expires_in_s;
  const when = left >= 0 ? `expires in ${left.toFixed(1)} s` : `expired ${(-left).toFixed(0)} s ago`;
  return `${when} · incarnation ${n.incarnation}`;
}

function nodeName(id) { return id === null || id === undefined ? "another node" : `node ${id}`; }

function nodesView() {
  polled(`<h1>Nodes</h1><div class="area"></div>`, async (area, current) => {
    const [data, recent] = await Promise.all([getJSON("/api/nodes"), getJSON("/api/nodes/events?limit=50")]);
    if (!current()) return;
    if (!data.cluster) {
      area.innerHTML = `<p class="muted">A single node (no --metadata postgresql://…): every segment is led here.</p>`;
      return;
    }
    const events = recent.events.map((e) => `<tr class="node-event" data-kind="${esc(e.kind)}" data-topic="${esc(e.topic)}">
      <td>${clock(e.time_ms)}</td><td><span class="kind kind-${esc(e.kind)}">${esc(e.kind)}</span></td>
      <td><a href="#/topic/${encodeURIComponent(e.topic)}">${esc(e.topic)}</a></td>
      <td>${e.segments.join(", ")}${e.successors.length ? ` → ${e.successors.join(", ")}` : ""}</td>
      <td>${esc(nodeName(e.from_node))} → ${e.to_nodes.map((n) => esc(nodeName(n))).join(", ")}</td>
      <td class="num">${e.seconds === null ? "–" : seconds(e.seconds)}</td><td>${esc(e.cause)}</td></tr>`).join("");
    area.innerHTML = `<table id="nodes"><thead><tr><th>node</th><th>address</th><th>lease</th><th class="num">open segments</th>
      <th>segments it leads (topic/segment)</th></tr></thead><tbody>
      ${data.nodes.map((n) => `<tr data-node="${n.node_id}" data-live="${n.live}" class="${n.live ? "" : "down"}">
        <td>${n.node_id}${n.node_id === data.this_node ? " (this node)" : ""}${n.live ? "" : ` <span class="lag-some">down</span>`}</td>
        <td>${esc(n.host)}:${n.port}</td><td class="lease">${leaseText(n)}</td><td class="num">${n.open_segments ?? "–"}</td>
        <td>${n.segments.map((s) => `<a href="#/topic/${encodeURIComponent(s.split("/")[0])}">${esc(s)}</a>`).join(", ") || "–"}</td></tr>`).join("")}</tbody></table>
      <h2>Recent moves and takeovers <span class="muted">(the ones node ${data.this_node} gave or received)</span></h2>
      <table id="node-events"><thead><tr><th>time</th><th>kind</th><th>topic</th><th>segments</th><th>from → to</th>
      <th class="num">took</th><th>cause</th></tr></thead><tbody>
      ${events || `<tr><td colspan="7" class="muted">none since this node started</td></tr>`}</tbody></table>`;
  });
}

// --- tiers, compaction, transactions ----------------------------------------------------

function gatewayView() {
  polled(`<h1>Tiers, compaction, transactions, bridges</h1><div class="area"></div>`, async (area, current) => {
    const [tier, compaction, txns, bridges] = await Promise.all([
      getJSON("/tier"), getJSON("/compaction"), getJSON("/api/transactions?limit=100"), getJSON("/api/bridges")]);
    if (!current()) return;
    const compacted = Object.entries(compaction.topics || {}).flatMap(([topic, parts]) =>
      Object.entries(parts).map(([p, st]) => `<tr><td>${esc(topic)}</td><td class="num">${p}</td>
        <td class="num">${st.compacted_end}</td><td class="num">${st.cleanable_end}</td>
        <td class="num">${bytes(st.cleanable_bytes)}</td><td class="num">${bytes(st.dirty_bytes)}</td>
        <td class="num">${(100 * st.dirty_ratio).toFixed(1)} %</td></tr>`)).join("");
    area.innerHTML = `<h2>Tiers</h2><dl class="kv" id="tier">
      <dt>tier 2</dt><dd>${esc(tier.tier2)}${tier.outage ? " <b>(unreachable)</b>" : ""}</dd>
      <dt>tier-1 pending / budget</dt><dd>${bytes(tier.tier1_pending_bytes)} / ${bytes(tier.tier1_budget_bytes)}</dd>
      <dt>uploaded</dt><dd>${tier.chunks_uploaded} chunks, ${bytes(tier.bytes_uploaded)}; ${tier.upload_errors} errors</dd>
      <dt>upload lag p50 / p99</dt><dd>${seconds(tier.tier2_upload_lag_p50_seconds)} / ${seconds(tier.tier2_upload_lag_p99_seconds)}</dd></dl>
      <h2>Compaction</h2>${compaction.runs === undefined ? `<p class="muted">off</p>` : `<dl class="kv" id="compaction">
      <dt>runs</dt><dd>${compaction.runs}${compaction.running ? " (running now)" : ""}, every ${compaction.interval_s} s</dd>
      <dt>reclaimed</dt><dd>${bytes(compaction.bytes_reclaimed)} (${compaction.records_removed} records)</dd></dl>
      <table><thead><tr><th>topic</th><th class="num">partition</th><th class="num">compacted to</th>
      <th class="num">cleanable to</th><th class="num">cleanable</th><th class="num">dirty</th><th class="num">dirty ratio</th></tr></thead>
      <tbody>${compacted || `<tr><td colspan="7" class="muted">no compacted topics</td></tr>`}</tbody></table>`}
      <h2>Transactions (${txns.open} open of ${txns.total})</h2><table id="transactions"><thead><tr>
      <th>transactional id</th><th>state</th><th class="num">producer id</th><th class="num">epoch</th>
      <th>started</th><th>partitions</th></tr></thead><tbody>
      ${txns.transactions.map((t) => `<tr data-open="${t.open}"><td>${esc(t.transactional_id)}</td><td>${esc(t.state)}</td>
        <td class="num">${t.producer_id}</td><td class="num">${t.epoch}</td>
        <td>${t.open && t.start_ms > 0 ? clock(t.start_ms) : "–"}</td><td>${esc(t.partitions.join(", ")) || "–"}</td></tr>`).join("")
        || `<tr><td colspan="6" class="muted">no transactional producers</td></tr>`}</tbody></table>
      <h2>MQTT bridges</h2>${bridgesPart(bridges.bridges)}`;
  });
}

// the bridge's counters, in the order a reader follows a message
const BRIDGE_COUNTERS = [
  ["received", "MQTT messages received"], ["forwarded", "records acknowledged by streamgate"],
  ["spooled", "written to the disk spool"], ["errors", "refused by streamgate"],
  ["dropped_qos0", "QoS 0 dropped while saturated"], ["unmapped", "matching no map"],
  ["reverse_published", "published to MQTT (reverse)"], ["mqtt_acks", "acknowledgements to the broker"],
  ["mqtt_connects", "MQTT connections"], ["mqtt_disconnects", "MQTT connections lost"]];

function bridgesPart(list) {
  if (!list.length) {
    return `<p class="muted">None configured: start the gateway with --console-bridge-metrics URL
      (the bridge's --metrics-listen, e.g. http://127.0.0.1:9101/metrics) to see a bridge here.</p>`;
  }
  return list.map((b) => {
    const g = b.gauges, c = b.counters;
    const head = `<dt>metrics</dt><dd>${esc(b.url)}</dd>`;
    if (!b.up) {
      return `<dl class="kv bridge" data-up="false">${head}<dt>state</dt><dd class="lag-some">not answering: ${esc(b.error)}</dd></dl>`;
    }
    return `<dl class="kv bridge" data-up="true">${head}
      <dt>MQTT</dt><dd>${g.mqtt_connected ? "connected" : `<span class="lag-some">disconnected</span>`}</dd>
      <dt>mode</dt><dd>${g.spooling ? `<span class="lag-some">spooling</span>` : "direct"}</dd>
      <dt>lag</dt><dd><span class="bridge-lag ${g.lag ? "lag-some" : "lag-zero"}">${g.lag ?? "–"}</span>
        <span class="muted">records received and not yet in streamgate; ${g.inflight ?? 0} in flight,
        ${g.spool_records ?? 0} in the spool (${bytes(g.spool_bytes)})</span></dd></dl>
      <table class="bridge-counters"><thead><tr><th>counter</th><th class="num">since the bridge started</th></tr></thead><tbody>
      ${BRIDGE_COUNTERS.filter(([name]) => name in c).map(([name, text]) => `<tr data-counter="${name}"><td>${esc(text)}</td>
        <td class="num">${c[name]}</td></tr>`).join("")}</tbody></table>`;
  }).join("");
}

window.addEventListener("hashchange", route);
route();
