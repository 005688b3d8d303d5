// spool's dashboard: live numbers, job lists and job pages from /events (server-sent events).
// Hand-written, no libraries. The server keeps the numbers and picks the rows; this only draws them.
"use strict";

function setText(id, text) {
  const el = document.getElementById(id);
  if (el) el.textContent = text;
}

function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined && text !== null) el.textContent = String(text);
  return el;
}

// The server's clock minus this browser's (ms), from the stream's messages: "3 min ago" is the
// server's "3 min", whatever the clock of the machine the page is read on.
let skew = 0;

function agoText(at) {
  const seconds = Math.round((Date.now() + skew - at) / 1000);
  const far = Math.abs(seconds);
  if (far < 10) return "just now";
  const size = far < 60 ? far + " s" : far < 3600 ? Math.floor(far / 60) + " min"
    : far < 86400 ? Math.floor(far / 3600) + " h" : Math.floor(far / 86400) + " d";
  return seconds > 0 ? size + " ago" : "in " + size;
}

// As story.duration_text says it: 350 ms, 4.2 s, 3 min 5 s, 2 h 4 min.
function durationText(seconds) {
  if (seconds < 1) return Math.max(0, Math.round(seconds * 1000)) + " ms";
  if (seconds < 60) return seconds.toFixed(1) + " s";
  const whole = Math.floor(seconds);
  if (whole < 3600) return Math.floor(whole / 60) + " min " + (whole % 60) + " s";
  return Math.floor(whole / 3600) + " h " + Math.floor((whole % 3600) / 60) + " min";
}

// Every <time class="ago"> as "3 min ago" (its RFC 3339 time in the title), and every running
// job's duration, counted on.
function showTimes() {
  for (const el of document.querySelectorAll("time.ago[datetime]")) {
    const at = Date.parse(el.getAttribute("datetime"));
    if (Number.isNaN(at)) continue;
    el.title = el.getAttribute("datetime");
    el.textContent = agoText(at);
  }
  for (const td of document.querySelectorAll("td.duration[data-started]")) {
    const started = Number(td.dataset.started), ended = td.dataset.ended;
    const state = td.parentElement.dataset.state;
    if (ended) td.textContent = durationText(Number(ended) - started);
    else td.textContent = state === "leased" ? "running " + durationText((Date.now() + skew) / 1000 - started) : "";
  }
}

// Every count of a state on the page (the overview's boxes, the job list's tabs).
function showCounts(counts) {
  for (const el of document.querySelectorAll(".n[data-state]")) {
    el.textContent = String(counts[el.dataset.state] || 0);
  }
}

// The overview: counts and the last hour's throughput chart. Returns the stream's receiver.
function overview(live) {
  const SVG = "http://www.w3.org/2000/svg";
  const chart = document.getElementById("chart");
  const WIDTH = 720, HEIGHT = 200, BINS = 720;
  let points = new Map();  // second -> [completed, failed]
  let now = 0, windowSeconds = 3600;  // what the server keeps
  let shownSeconds = 3600;  // what the chart shows: the zoom buttons pick it

  function bins() {
    // The busiest second of each equal slice of the shown window, oldest first (a slice is never
    // shorter than a second, the buckets' own size): so the chart's top is the window's busiest
    // second, the number the rates line names, never an average below it.
    const count = Math.min(BINS, shownSeconds), per = shownSeconds / count, start = now - shownSeconds + 1;
    const done = new Array(count).fill(0), failed = new Array(count).fill(0);
    for (const [second, [c, f]] of points) {
      const i = Math.floor((second - start) / per);
      if (i < 0 || i >= count) continue;
      done[i] = Math.max(done[i], c);
      failed[i] = Math.max(failed[i], f);
    }
    return [done, failed];
  }

  function line(values, top, cls) {
    const path = document.createElementNS(SVG, "polyline");
    const step = WIDTH / (values.length - 1);
    path.setAttribute("points", values.map((v, i) =>
      (i * step).toFixed(1) + "," + (HEIGHT - (top ? (v / top) * (HEIGHT - 4) : 0)).toFixed(1)).join(" "));
    path.setAttribute("class", "series " + cls);
    return path;
  }

  function draw() {
    const [done, failed] = bins();
    const top = Math.max(1, ...done, ...failed);
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    for (const y of [0.25, 0.5, 0.75]) {
      const grid = document.createElementNS(SVG, "line");
      grid.setAttribute("x1", "0"); grid.setAttribute("x2", String(WIDTH));
      grid.setAttribute("y1", String(HEIGHT * y)); grid.setAttribute("y2", String(HEIGHT * y));
      grid.setAttribute("class", "grid");
      chart.appendChild(grid);
    }
    chart.appendChild(line(done, top, "completed"));
    chart.appendChild(line(failed, top, "failed"));
    setText("chart-max", top + "/s");
    let lastC = 0, lastF = 0, peak = 0;
    for (const [second, [c, f]] of points) {
      if (second > now - 60) { lastC += c; lastF += f; }
      peak = Math.max(peak, c, f);
    }
    setText("rate-completed", String(lastC));
    setText("rate-failed", String(lastF));
    setText("rate-peak", String(peak));
  }

  function receive(message) {
    if (message.full) points = new Map();
    now = message.now;
    windowSeconds = message.window;
    for (const [second, c, f] of message.points) {
      if (c || f) points.set(second, [c, f]); else points.delete(second);
    }
    for (const second of points.keys()) if (second <= now - windowSeconds) points.delete(second);
    const trouble = document.getElementById("trouble");
    if (trouble) { trouble.hidden = !message.trouble; trouble.textContent = message.trouble || ""; }
    live.dataset.updated = String(now);
    draw();
  }

  for (const button of document.querySelectorAll("#zoom [data-window]")) {
    button.addEventListener("click", () => {
      shownSeconds = Number(button.dataset.window);
      for (const other of document.querySelectorAll("#zoom [data-window]")) other.classList.remove("here");
      button.classList.add("here");
      setText("axis-start", "-" + shownSeconds / 60 + " min");
      setText("axis-mid", "-" + shownSeconds / 120 + " min");
      draw();
    });
  }

  draw();
  return receive;
}

// A job list: the server sends the changed rows its filter matches ("jobs", newest first) and the
// ids of changed jobs it no longer matches ("gone"). Shown rows are redrawn in place; on the first
// page a new job takes its place by id (newest first) and the page keeps its length.
function jobList(table) {
  const body = table.tBodies[0];
  const size = Number(table.dataset.pageSize);
  const first = table.dataset.firstPage === "1";
  const pick = table.dataset.pick === "1";
  const all = document.getElementById("pick-all");
  if (all) {
    all.addEventListener("change", () => {
      for (const box of body.querySelectorAll("td.pick input")) box.checked = all.checked;
    });
  }

  function shown(id) {
    return body.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
  }

  function rowOf(job, ticked) {
    const tr = element("tr");
    tr.dataset.id = job.id;
    tr.dataset.task = job.task;
    tr.dataset.state = job.state;
    if (pick) {
      const cell = element("td", "pick");
      const box = element("input");
      box.type = "checkbox";
      box.name = "pick-" + job.id;
      box.value = "1";
      box.checked = ticked;
      box.setAttribute("form", "picked");
      box.setAttribute("aria-label", "tick " + job.id);
      cell.appendChild(box);
      tr.appendChild(cell);
    }
    const id = element("td", "id");
    const link = element("a", "", job.id);
    link.href = "/jobs/" + encodeURIComponent(job.id);
    id.appendChild(link);
    tr.appendChild(id);
    tr.appendChild(element("td", "", job.task));
    const state = element("td");
    state.appendChild(element("span", "badge state-" + job.state, job.state));
    tr.appendChild(state);
    tr.appendChild(element("td", "", job.reason || ""));
    tr.appendChild(element("td", "", job.attempt));
    tr.appendChild(element("td", "", job.tries + "/" + job.max_tries));
    tr.appendChild(element("td", "key", job.key !== job.id ? job.key : ""));
    const submitted = element("td", "time");
    const time = element("time", "ago", job.submitted_at);
    time.setAttribute("datetime", job.submitted_at);
    submitted.appendChild(time);
    tr.appendChild(submitted);
    const ran = element("td", "duration");
    if (job.run) {
      ran.dataset.started = String(job.run.started);
      ran.dataset.ended = job.run.ended === null ? "" : String(job.run.ended);
    }
    tr.appendChild(ran);
    tr.classList.add("fresh");
    return tr;
  }

  function place(tr, id) {
    for (const other of body.querySelectorAll("tr[data-id]")) {
      if (other.dataset.id < id) { body.insertBefore(tr, other); return; }
    }
    body.appendChild(tr);
  }

  return (message) => {
    if (!message.jobs) return;
    for (const id of message.gone) {
      const tr = shown(id);
      if (tr) tr.remove();
    }
    for (const job of message.jobs) {
      const tr = shown(job.id);
      if (tr) tr.replaceWith(rowOf(job, Boolean(tr.querySelector("td.pick input:checked"))));
      else if (first) place(rowOf(job, false), job.id);
    }
    const rows = body.querySelectorAll("tr[data-id]");
    for (let i = size; i < rows.length; i++) rows[i].remove();
    const empty = body.querySelector("td.empty");
    if (empty && rows.length) empty.parentElement.remove();
    const next = document.getElementById("page-next");
    const kept = body.querySelectorAll("tr[data-id]");
    if (next && kept.length) next.href = next.href.replace(/before=[^&]*/, "before=" + kept[kept.length - 1].dataset.id);
    const cut = document.getElementById("live-cut");
    if (cut && message.cut) cut.hidden = false;
    showTimes();
  };
}

// A job's page: its progress while it runs, drawn in place; any other change to the job (its
// state, a new attempt) reloads the page, which shows the whole new story.
function jobPage(live) {
  return (message) => {
    if (!message.jobs) return;
    for (const job of message.jobs) {
      if (job.state !== live.dataset.state || String(job.attempt) !== live.dataset.attempt) {
        window.location.reload();
        return;
      }
    }
    const progress = message.progress;
    if (!progress || live.dataset.state !== "leased") return;
    let section = document.getElementById("progress");
    if (!section) {
      section = element("section", "progress");
      section.id = "progress";
      live.insertAdjacentElement("afterend", section);
    }
    section.replaceChildren(element("h2", "", "Progress"));
    if (progress.percent !== null) {
      const bar = element("progress", "", progress.percent + "%");
      bar.max = 100;
      bar.value = progress.percent;
      section.append(bar, " " + progress.percent + "% ");
    }
    section.append(progress.message || "");
  };
}

// The busy view: a job that starts running or stops (a changed leased row not shown, or a shown
// one gone) reloads the page, at most every two seconds; runtimes count on by themselves.
function busyList(table) {
  let reloading = false;
  const shown = (id) => table.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
  return (message) => {
    if (!message.jobs || reloading) return;
    const started = message.jobs.some((job) => !shown(job.id));
    const ended = message.gone.some((id) => shown(id));
    if (started || ended || message.cut) {
      reloading = true;
      setTimeout(() => window.location.reload(), 2000 - (Date.now() % 2000));
    }
  };
}

(function () {
  showTimes();
  setInterval(showTimes, 5000);
  const box = document.querySelector("[data-events]");
  if (!box || !window.EventSource) return;
  const receivers = [(message) => showCounts(message.counts)];
  if (box.id === "live") receivers.push(overview(box));
  if (box.id === "jobs") receivers.push(jobList(box));
  if (box.id === "job-live") receivers.push(jobPage(box));
  if (box.id === "busy") receivers.push(busyList(box));

  // A browser reconnects by itself after a stream ends, but gives up on a refusal (429: this
  // token has its most streams open, e.g. in other tabs): then try again a little later.
  const connect = () => {
    const source = new EventSource(box.dataset.events);
    source.onmessage = (event) => {
      const message = JSON.parse(event.data);
      skew = message.now * 1000 - Date.now();
      for (const receive of receivers) receive(message);
      box.dataset.updated = String(message.now);
    };
    source.onerror = () => {
      box.classList.add("stale");
      if (source.readyState === EventSource.CLOSED) setTimeout(connect, 15000);
    };
    source.onopen = () => { box.classList.remove("stale"); };
  };
  connect();
})();
