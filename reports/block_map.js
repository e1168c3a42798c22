/* The block map page's script (reports/block_map_page.py inlines it; it fetches nothing).
 *
 * The data (JSON in #block-map-data) holds the state before the window and, per step, what
 * changed; a step's full state is rebuilt by applying the changes in order from the nearest
 * checkpoint (one kept every CHECKPOINT steps). window.blockMap lets a test drive the page.
 */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("block-map-data").textContent);
  var CHECKPOINT = 32;
  var paged = D.about.kind === "paged";
  var steps = D.steps;
  var owners = D.owners; // index -> [request id or null, sample or null, label]

  function clone(s) {
    var seqs = new Map();
    s.seqs.forEach(function (v, k) { seqs.set(k, v); });
    return {index: s.index, refs: s.refs.slice(), contents: s.contents.slice(),
      cpu: s.cpu.slice(), seqs: seqs, regions: s.regions};
  }
  function seqEntry(row) {
    return {seq: row[0], owner: row[1], swapped: !!row[2], tokens: row[3], computed: row[4],
      table: row[5]};
  }
  function initialState() {
    var seqs = new Map();
    D.initial.seqs.forEach(function (row) { seqs.set(row[0], seqEntry(row)); });
    return {index: -1, refs: D.initial.refs.slice(), contents: D.initial.contents.slice(),
      cpu: D.initial.cpu.slice(), seqs: seqs, regions: D.initial.regions};
  }
  function apply(state, i) {
    var st = steps[i];
    st.b.forEach(function (x) { state.refs[x[0]] = x[1]; state.contents[x[0]] = x[2]; });
    st.c.forEach(function (x) { state.cpu[x[0]] = x[1]; });
    st.g.forEach(function (seq) { state.seqs.delete(seq); });
    st.k.forEach(function (x) {
      var e = state.seqs.get(x[0]);
      state.seqs.set(x[0], {seq: e.seq, owner: e.owner, swapped: e.swapped, tokens: x[1],
        computed: x[2], table: e.table});
    });
    st.s.forEach(function (row) { state.seqs.set(row[0], seqEntry(row)); });
    if (!paged) { state.regions = st.r; }
    state.index = i;
  }
  var checkpoints = [];
  (function build() {
    var s = initialState();
    for (var i = 0; i < steps.length; i++) {
      apply(s, i);
      if (i % CHECKPOINT === 0) { checkpoints.push(clone(s)); }
    }
  })();
  var current = null;
  function stateAt(i) {
    if (current === null || current.index > i || i - current.index > CHECKPOINT) {
      current = clone(checkpoints[Math.floor(i / CHECKPOINT)]);
    }
    while (current.index < i) { apply(current, current.index + 1); }
    return current;
  }

  function hue(ownerIndex) {
    var o = owners[ownerIndex];
    var id = o[0] === null ? 7 : o[0];
    return (id * 137.508) % 360;
  }
  function color(ownerIndex) {
    var o = owners[ownerIndex];
    var light = 40 + 12 * (((o[1] || 1) - 1) % 3);
    return "hsl(" + hue(ownerIndex).toFixed(1) + ",62%," + light + "%)";
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function ownerOrder(a, b) {
    var x = owners[a.owner], y = owners[b.owner];
    return ((x[0] === null ? -1 : x[0]) - (y[0] === null ? -1 : y[0])) ||
      ((x[1] || 0) - (y[1] || 0)) || (a.seq - b.seq);
  }

  var grid = document.getElementById("gpu-grid");
  var cpuGrid = document.getElementById("cpu-grid");
  var numCells = paged ? D.about.num_blocks : Math.ceil(D.about.num_slots / D.about.block_size);
  var cells = [];
  for (var c = 0; c < numCells; c++) {
    var cell = el("div", "b", paged ? String(c) : "");
    grid.appendChild(cell);
    cells.push(cell);
  }
  var cpuCells = [];
  if (D.shows_cpu) {
    for (var k = 0; k < D.about.num_cpu_blocks; k++) {
      var cc = el("div", "b", String(k));
      cpuGrid.appendChild(cc);
      cpuCells.push(cc);
    }
  }

  function drawPaged(state, hot) {
    var holders = new Map(); // block -> [[owner, logical index], ...] (GPU tables)
    var cpuHolders = new Map();
    state.seqs.forEach(function (s) {
      var into = s.swapped ? cpuHolders : holders;
      s.table.forEach(function (b, i) {
        if (!into.has(b)) { into.set(b, []); }
        into.get(b).push([s.owner, i]);
      });
    });
    var counts = {used: 0, cached: 0, cachedFree: 0, shared: 0, refs: 0};
    for (var b = 0; b < cells.length; b++) {
      var ref = state.refs[b], content = state.contents[b], cell = cells[b];
      var cls = "b";
      var tip = "block " + b;
      counts.refs += ref;
      if (ref > 0) {
        counts.used++;
        cls += " used";
        var hs = holders.get(b) || [];
        cell.style.background = hs.length ? color(hs[0][0]) : "#718096";
        tip += ": " + hs.map(function (h) {
          return owners[h[0]][2] + " (logical block " + h[1] + ")";
        }).join(", ") + "; reference count " + ref;
        if (ref > 1) { cls += " shared"; counts.shared++; }
        if (content) { cls += " cached"; counts.cached++; }
      } else {
        cell.style.background = "";
        if (content) { cls += " cached-free"; counts.cachedFree++; tip += ": free, cached"; }
        else { tip += ": free"; }
      }
      if (content) { tip += "; holds " + D.contents[content]; }
      if (hot.has(b)) { cls += " hot"; }
      cell.className = cls;
      cell.title = tip;
    }
    cpuCells.forEach(function (cell, b) {
      var hs = cpuHolders.get(b) || [];
      cell.className = "b" + (state.cpu[b] > 0 ? " used" : "");
      cell.style.background = hs.length ? color(hs[0][0]) : "";
      cell.title = "CPU block " + b + (hs.length ? ": " + hs.map(function (h) {
        return owners[h[0]][2] + " (logical block " + h[1] + ")";
      }).join(", ") : ": free");
    });
    return counts;
  }

  var SEGMENT = {computed: 1.0, reserved: 0.55, over: 0.25, rounding: 0.1};
  function drawRegions(state) {
    var bs = D.about.block_size, parts = cells.map(function () { return []; });
    var counts = {used: 0, regions: state.regions.length, slots: 0};
    state.regions.forEach(function (r) {
      // [seq, owner, offset, held, asked, computed, final_len]
      var off = r[2], fill = Math.min(r[6], r[4]);
      var segs = [["computed", off, off + r[5]], ["reserved", off + r[5], off + fill],
        ["over", off + fill, off + r[4]], ["rounding", off + r[4], off + r[3]]];
      counts.slots += r[3];
      segs.forEach(function (sg) {
        for (var x = sg[1]; x < sg[2];) {
          var cellIndex = Math.floor(x / bs), end = Math.min(sg[2], (cellIndex + 1) * bs);
          parts[cellIndex].push([x - cellIndex * bs, end - cellIndex * bs, r[1], sg[0]]);
          x = end;
        }
      });
    });
    parts.forEach(function (ps, i) {
      var cell = cells[i];
      if (!ps.length) { cell.className = "b"; cell.style.background = ""; cell.title = "slots " +
        (i * bs) + "–" + ((i + 1) * bs - 1) + ": free"; return; }
      counts.used++;
      ps.sort(function (a, b) { return a[0] - b[0]; });
      var stops = [], at = 0;
      ps.forEach(function (p) {
        if (p[0] > at) { stops.push("#fff " + (100 * at / bs) + "% " + (100 * p[0] / bs) + "%"); }
        var h = hue(p[2]).toFixed(1), a = SEGMENT[p[3]];
        var col = "hsla(" + h + ",62%,42%," + a + ")";
        stops.push(col + " " + (100 * p[0] / bs) + "% " + (100 * p[1] / bs) + "%");
        at = p[1];
      });
      if (at < bs) { stops.push("#fff " + (100 * at / bs) + "% 100%"); }
      cell.className = "b used";
      cell.style.background = "linear-gradient(to right," + stops.join(",") + ")";
      cell.title = "slots " + (i * bs) + "–" + ((i + 1) * bs - 1) + ": " + ps.map(function (p) {
        return owners[p[2]][2] + " " + p[3] + " " + (p[1] - p[0]);
      }).join(", ");
    });
    return counts;
  }

  function drawTables(state) {
    var box = document.getElementById("tables");
    box.textContent = "";
    var rows = 0, bs = D.about.block_size;
    if (paged) {
      Array.from(state.seqs.values()).sort(ownerOrder).forEach(function (s) {
        var row = el("div", "row");
        row.appendChild(el("span", "who", owners[s.owner][2]));
        s.table.forEach(function (b, i) {
          var chip = el("span", "chip" + (s.swapped ? " cpu" : ""), String(b));
          chip.style.background = color(s.owner);
          var filled = Math.max(0, Math.min(bs, s.tokens - i * bs));
          chip.title = "logical block " + i + " -> " + (s.swapped ? "CPU" : "GPU") + " block " +
            b + ": " + filled + " of " + bs + " slots";
          row.appendChild(chip);
        });
        row.appendChild(el("span", "note", s.tokens + " tokens" +
          (s.swapped ? ", swapped out to CPU" : "") +
          (s.table.length ? ", last block " + (s.tokens - (s.table.length - 1) * bs) + "/" + bs
            : "")));
        box.appendChild(row);
        rows++;
      });
    } else {
      state.regions.slice().sort(function (a, b) { return a[2] - b[2]; }).forEach(function (r) {
        var row = el("div", "row");
        var chip = el("span", "chip", "■");
        chip.style.background = color(r[1]);
        row.appendChild(chip);
        row.appendChild(el("span", "who", owners[r[1]][2]));
        var fill = Math.min(r[6], r[4]);
        row.appendChild(el("span", "note", "slots " + r[2] + "–" + (r[2] + r[3] - 1) + ": " +
          r[5] + " computed, " + (fill - r[5]) + " reserved for its next tokens, " +
          (r[4] - fill) + " over-reserved, " + (r[3] - r[4]) + " of allocator rounding"));
        box.appendChild(row);
        rows++;
      });
    }
    if (!rows) { box.appendChild(el("p", "seg-note", "No request holds KV memory.")); }
    return rows;
  }

  function drawQueues(q) {
    var box = document.getElementById("queues");
    box.textContent = "";
    ["running", "waiting", "swapped"].forEach(function (name, i) {
      if (name === "swapped" && !paged) { return; }
      var line = el("div");
      line.appendChild(el("b", "", name + " " + q[3][i]));
      line.appendChild(document.createTextNode(" " + (q[i].join(", ") || "–")));
      box.appendChild(line);
    });
  }

  var slider = document.getElementById("slider");
  var label = document.getElementById("step-label");
  var summary = null;
  function show(i) {
    var state = stateAt(i), st = steps[i], hot = new Set();
    st.e.forEach(function (e) { e[2].forEach(function (b) { hot.add(b); }); });
    var counts = paged ? drawPaged(state, hot) : drawRegions(state);
    var rows = drawTables(state);
    drawQueues(st.q);
    var list = document.getElementById("events");
    list.textContent = "";
    st.e.forEach(function (e) { list.appendChild(el("li", "ev-" + e[0], e[1])); });
    if (!st.e.length) { list.appendChild(el("li", "", "Nothing happens to the blocks.")); }
    label.textContent = "Step " + st.n + " (" + (i + 1) + " of " + steps.length + ") · " +
      st.t[0].toFixed(4) + " s → " + st.t[1].toFixed(4) + " s · computes " + st.w[0] +
      " prompt and " + st.w[1] + " decode tokens";
    if (Number(slider.value) !== i) { slider.value = String(i); }
    summary = {index: i, step: st.n, rows: rows, events: st.e.length, counts: counts,
      label: label.textContent};
  }
  slider.max = String(steps.length - 1);
  slider.addEventListener("input", function () { show(Number(slider.value)); });
  var timer = null, play = document.getElementById("play");
  function stop() { if (timer !== null) { clearInterval(timer); timer = null; } play.textContent = "▶ play"; }
  play.addEventListener("click", function () {
    if (timer !== null) { stop(); return; }
    play.textContent = "❚❚ pause";
    timer = setInterval(function () {
      var i = Number(slider.value);
      if (i >= steps.length - 1) { stop(); return; }
      show(i + 1);
    }, Number(document.getElementById("speed").value));
  });
  document.getElementById("prev").addEventListener("click", function () {
    show(Math.max(0, Number(slider.value) - 1));
  });
  document.getElementById("next").addEventListener("click", function () {
    show(Math.min(steps.length - 1, Number(slider.value) + 1));
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "ArrowRight") { document.getElementById("next").click(); }
    if (ev.key === "ArrowLeft") { document.getElementById("prev").click(); }
  });
  window.blockMap = {count: steps.length, show: show, summary: function () { return summary; },
    stop: stop};
  show(Math.min(Math.max(0, D.open_at), steps.length - 1));
})();
