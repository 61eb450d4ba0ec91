// The live page: reads the public API every REFRESH ms and redraws. No framework, no build.
"use strict";
(function () {
  const REFRESH = 1500;
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const state = {
    items: splitIDs(params.get("items") || localStorage.getItem("tally.items") || "item-0"),
    ads: splitIDs(params.get("ads") || localStorage.getItem("tally.ads") || ""),
    key: localStorage.getItem("tally.key") || "",
    chart: params.get("chart") || "",
    prev: {},
  };

  function splitIDs(s) { return s.split(",").map((x) => x.trim()).filter(Boolean).slice(0, 100); }

  async function get(path) {
    const headers = state.key ? { "X-API-Key": state.key } : {};
    const resp = await fetch(path, { headers, cache: "no-store" });
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) {
      const err = new Error(body.error || resp.status + " " + resp.statusText);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  function fmt(n) { return (n ?? 0).toLocaleString("en-US"); }

  function cell(tr, text, key) {
    const td = document.createElement("td");
    td.textContent = text;
    if (key !== undefined) {
      if (state.prev[key] !== undefined && state.prev[key] !== text) td.classList.add("bump");
      state.prev[key] = text;
    }
    tr.appendChild(td);
    return td;
  }

  async function refreshItems() {
    const tbody = $("item-table").tBodies[0];
    if (state.items.length === 0) { tbody.replaceChildren(); return; }
    const data = await get("/v1/counts?ids=" + encodeURIComponent(state.items.join(",")));
    const rows = data.items.map((it) => {
      const tr = document.createElement("tr");
      tr.dataset.item = it.item_id;
      cell(tr, it.item_id);
      cell(tr, fmt(it.views), "v:" + it.item_id).classList.add("views");
      cell(tr, fmt(it.unique_viewers), "u:" + it.item_id);
      cell(tr, fmt(it.likes), "l:" + it.item_id);
      return tr;
    });
    tbody.replaceChildren(...rows);
  }

  function sum(points, field) { return points.reduce((a, p) => a + (p[field] || 0), 0); }

  async function refreshAds() {
    const tbody = $("ad-table").tBodies[0];
    const note = $("ads-note");
    if (state.ads.length === 0) { tbody.replaceChildren(); note.hidden = true; return; }
    const to = new Date(), from = new Date(to - 24 * 3600e3);
    const rows = [];
    for (const ad of state.ads) {
      try {
        const s = await get(`/v1/ads/${encodeURIComponent(ad)}/clicks?granularity=hour&from=${from.toISOString()}&to=${to.toISOString()}`);
        const pts = s.points || [];
        const tr = document.createElement("tr");
        tr.dataset.ad = ad;
        cell(tr, ad);
        cell(tr, fmt(sum(pts, "count")), "c:" + ad);
        cell(tr, fmt(sum(pts, "billable_count")), "b:" + ad);
        const b = document.createElement("span");
        const final = pts.length > 0 && pts.every((p) => p.final);
        b.className = "badge " + (final ? "final" : "prov");
        b.textContent = final ? "final" : "provisional";
        cell(tr, "").appendChild(b);
        rows.push(tr);
        note.hidden = true;
      } catch (e) {
        if (e.status !== 404 || !/no such route/.test(e.message)) throw e;
        note.textContent = "This collector does not serve clicks.";
        note.hidden = false;
        break;
      }
    }
    tbody.replaceChildren(...rows);
  }

  function fillChartChoices() {
    const sel = $("chart-of");
    const opts = state.items.map((i) => "item:" + i).concat(state.ads.map((a) => "ad:" + a));
    if (!opts.includes(state.chart)) state.chart = opts[0] || "";
    sel.replaceChildren(...opts.map((o) => { const e = document.createElement("option"); e.value = o; e.textContent = o; return e; }));
    sel.value = state.chart;
  }

  const SVG = "http://www.w3.org/2000/svg";
  async function refreshChart() {
    const svg = $("chart");
    if (!state.chart) { svg.replaceChildren(); return; }
    const [kind, id] = [state.chart.slice(0, state.chart.indexOf(":")), state.chart.slice(state.chart.indexOf(":") + 1)];
    const to = new Date(), from = new Date(to - 59 * 60e3);
    const q = `?granularity=minute&from=${from.toISOString()}&to=${to.toISOString()}`;
    let bars;
    if (kind === "item") {
      const s = await get(`/v1/items/${encodeURIComponent(id)}/views${q}`);
      bars = s.points.map((p) => ({ v: p.views, cls: "views", t: p.t }));
    } else {
      const s = await get(`/v1/ads/${encodeURIComponent(id)}/clicks${q}`);
      bars = s.points.map((p) => ({ v: p.count, cls: p.final ? "final" : "prov", t: p.t }));
    }
    const maxV = Math.max(1, ...bars.map((b) => b.v));
    const w = 600 / Math.max(1, bars.length);
    const colors = { views: "#2f6fdf", final: "#2a9d5b", prov: "#f0a030" };
    svg.replaceChildren(...bars.map((b, i) => {
      const r = document.createElementNS(SVG, "rect");
      const h = (b.v / maxV) * 150;
      r.setAttribute("x", (i * w + 0.5).toFixed(1));
      r.setAttribute("y", (160 - h).toFixed(1));
      r.setAttribute("width", Math.max(1, w - 1).toFixed(1));
      r.setAttribute("height", h.toFixed(1));
      r.setAttribute("fill", colors[b.cls]);
      const title = document.createElementNS(SVG, "title");
      title.textContent = `${b.t}: ${b.v}`;
      r.appendChild(title);
      return r;
    }));
    svg.dataset.total = String(bars.reduce((a, b) => a + b.v, 0));
  }

  function entries(top) {
    return top.entries || top.top || top.items || [];
  }

  async function refreshTops() {
    const note = $("top-note");
    const win = $("top-window").value;
    for (const [kind, list] of [["items", "top-items"], ["ads", "top-ads"]]) {
      try {
        const top = await get(`/v1/top?kind=${kind}&window=${win}&k=10`);
        $(list).replaceChildren(...entries(top).map((e) => {
          const li = document.createElement("li");
          li.textContent = e.key ?? e.item_id ?? e.ad_id;
          const n = document.createElement("span");
          n.textContent = fmt(e.count);
          li.appendChild(n);
          return li;
        }));
        note.hidden = !top.error_bound;
        if (top.error_bound) note.textContent = `24h counts are approximate (error bound: ${JSON.stringify(top.error_bound)}).`;
      } catch (e) {
        if (e.status !== 404 || !/no such route/.test(e.message)) throw e;
        note.textContent = "Top lists appear once the top-K tracker runs.";
        note.hidden = false;
      }
    }
  }

  async function refresh() {
    const status = $("status");
    try {
      await Promise.all([refreshItems(), refreshAds(), refreshChart(), refreshTops()]);
      status.textContent = "updated " + new Date().toLocaleTimeString();
      status.classList.remove("err");
    } catch (e) {
      status.textContent = e.status === 401 || e.status === 403 ? "an API key with the read scope is needed" : "error: " + e.message;
      status.classList.add("err");
    }
  }

  function init() {
    $("items").value = state.items.join(", ");
    $("ads").value = state.ads.join(", ");
    $("key").value = state.key;
    fillChartChoices();
    $("choose").addEventListener("submit", (ev) => {
      ev.preventDefault();
      state.items = splitIDs($("items").value);
      state.ads = splitIDs($("ads").value);
      state.key = $("key").value.trim();
      localStorage.setItem("tally.items", state.items.join(","));
      localStorage.setItem("tally.ads", state.ads.join(","));
      localStorage.setItem("tally.key", state.key);
      fillChartChoices();
      refresh();
    });
    $("chart-of").addEventListener("change", (ev) => { state.chart = ev.target.value; refresh(); });
    $("top-window").addEventListener("change", refresh);
    refresh();
    setInterval(refresh, REFRESH);
  }
  init();
})();
