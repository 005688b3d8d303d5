// spool's dashboard: live counts and the last hour's throughput from /events (server-sent events).
// Hand-written, no libraries. The server keeps the numbers; this only draws what it is sent.
"use strict";

(function () {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;

  const SVG = "http://www.w3.org/2000/svg";
  const chart = document.getElementById("chart");
  const WIDTH = 720, HEIGHT = 200, BINS = 720;
  let points = new Map();  // second -> [completed, failed]
  let now = 0, windowSeconds = 3600;  // what the server keeps
  let shownSeconds = 3600;  // what the chart shows: the zoom buttons pick it

  function setText(id, text) {
    const el = document.getElementById(id);
    if (el) el.textContent = text;
  }

  function showCounts(counts) {
    for (const el of document.querySelectorAll("[data-state]")) {
      if (el.classList.contains("n")) el.textContent = String(counts[el.dataset.state] || 0);
    }
  }

  function bins() {
    // Average per-second rates in equal slices of the shown window, oldest first; a slice is never
    // shorter than a second (the buckets' own size).
    const count = Math.min(BINS, shownSeconds), per = shownSeconds / count, start = now - shownSeconds + 1;
    const done = new Array(count).fill(0), failed = new Array(count).fill(0);
    for (const [second, [c, f]] of points) {
      const i = Math.floor((second - start) / per);
      if (i < 0 || i >= count) continue;
      done[i] += c / per;
      failed[i] += f / per;
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
    setText("chart-max", (top >= 10 ? top.toFixed(0) : top.toFixed(1)) + "/s");
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
    showCounts(message.counts);
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

  // A browser reconnects by itself after a stream ends, but gives up on a refusal (429: this
  // token has its most streams open, e.g. in other tabs): then try again a little later.
  const connect = () => {
    const source = new EventSource(live.dataset.events);
    source.onmessage = (event) => receive(JSON.parse(event.data));
    source.onerror = () => {
      live.classList.add("stale");
      if (source.readyState === EventSource.CLOSED) setTimeout(connect, 15000);
    };
    source.onopen = () => { live.classList.remove("stale"); };
  };
  connect();
  draw();
})();
