// Draws the book's live figures (tpviz.core.live): each <div class="tpviz-live"> holds a
// Vega-Lite spec with its data precomputed by the library at build time. The Vega scripts are
// served from the book's own files. Views are kept in window.tpvizLive for the browser test.
//
// Three things make a figure fit the page it is read on:
// - the figure's words (rows with a `note`) are wrapped to the column's width, a line a row,
//   instead of being cut with "…";
// - a chart wider than its column is drawn again with narrower plots (and, on a narrow screen,
//   its legend below), and only if that is not enough is it scaled down to the column;
// - a setting the library refuses shows its ⚠ message alone, in HTML, without an empty frame.
window.tpvizLive = [];

(function () {
  const NOTES = "tpviz_notes";

  // each note longer than `chars` becomes several rows, one a line (same fields otherwise)
  function wrapRows(rows, chars) {
    const out = [];
    for (const r of rows) {
      if (typeof r.note !== "string" || r.note.length <= chars) { out.push(r); continue; }
      let line = "";
      for (const word of r.note.split(" ")) {
        if (line && (line + " " + word).length > chars) { out.push({ ...r, note: line }); line = word; }
        else line = line ? line + " " + word : word;
      }
      if (line) out.push({ ...r, note: line });
    }
    return out;
  }

  // text marks that draw notes lose their width limit (the rows are short enough now)
  function unlimitNotes(spec) {
    const enc = spec.encoding, mark = spec.mark;
    if (mark && enc && enc.text && enc.text.field === "note") {
      spec.mark = typeof mark === "string" ? { type: mark } : { ...mark };
      delete spec.mark.limit;
    }
    for (const key of ["vconcat", "hconcat", "concat", "layer"]) {
      if (Array.isArray(spec[key])) spec[key].forEach(unlimitNotes);
    }
  }

  // narrower plots: every plot width of at least 120 px loses `by` px (at least 120 left)
  function narrow(spec, by) {
    if (typeof spec.width === "number" && spec.width >= 120) {
      spec.width = Math.max(120, Math.round(spec.width - by));
    }
    for (const key of ["vconcat", "hconcat", "concat", "layer"]) {
      if (Array.isArray(spec[key])) {
        const share = key === "hconcat" || key === "concat" ? by / spec[key].length : by;
        for (const v of spec[key]) narrow(v, share);
      }
    }
  }

  // the widest plot width in the spec (after narrowing): what the page draws plots at
  function widest(spec) {
    let w = typeof spec.width === "number" ? spec.width : 0;
    for (const key of ["vconcat", "hconcat", "concat", "layer"]) {
      if (Array.isArray(spec[key])) for (const v of spec[key]) w = Math.max(w, widest(v));
    }
    return w;
  }

  function notesOf(rows, id) {
    return rows.filter((r) => r._id === id && r.note !== undefined && r.note !== null)
      .map((r) => String(r.note));
  }

  function refused(rows, id) {  // only notes, nothing to draw: the library refused the setting
    return rows.filter((r) => r._id === id).every((r) => r.note !== undefined &&
      Object.keys(r).every((k) => k === "note" || k === "_id"));
  }

  // the chart's accessible label: its caption's words (read once: innerText lays the page out)
  function captionOf(div) {
    const fig = div.closest("figure");
    const caption = fig && fig.querySelector("figcaption");
    return caption ? caption.innerText.trim() : "";
  }

  function label(caption, div, words) {
    return "Interactive chart. " + (caption || words.join(" ") || div.dataset.name);
  }

  // Warms a figure at load: the dataflow and the SVG redraw run through another value of each
  // control and back, all before the next frame, so the reader sees nothing of it. Without it a
  // fresh page's first move pays for Vega's first pass (code not yet compiled, the renderer's
  // and the browser's caches empty) and takes up to twice as long as the moves after it.
  async function warm(view, spec) {
    const bound = (spec.params || []).filter((p) => p.bind && p.bind.input);
    const start = bound.map((p) => view.signal(p.name));
    for (const p of bound) {
      const values = p.bind.input === "select" ? p.bind.options : [p.bind.min, p.bind.max];
      const other = (values || []).find((v) => v !== view.signal(p.name));
      if (other === undefined) continue;
      view.signal(p.name, other);
      await view.runAsync();
    }
    bound.forEach((p, i) => view.signal(p.name, start[i]));
    await view.runAsync();
  }

  async function draw(div) {
    const spec = JSON.parse(div.querySelector('script[type="application/json"]').textContent);
    const avail = Math.max(200, div.clientWidth);
    const rows = (spec.datasets && spec.datasets.rows) || [];
    if (spec.datasets) spec.datasets.rows = wrapRows(rows, Math.floor((avail - 16) / 7.2));
    unlimitNotes(spec);
    if (avail < 560) {  // a phone: the legend goes under the chart
      spec.config = spec.config || {};
      spec.config.legend = Object.assign({}, spec.config.legend, { orient: "bottom" });
    }
    const notes = document.createElement("div");
    notes.className = "tpviz-notes";
    notes.setAttribute("aria-live", "polite");
    const chart = document.createElement("div");
    chart.className = "tpviz-chart";
    div.replaceChildren(notes, chart);
    const embed = (s) => vegaEmbed(chart, s, { renderer: "svg", actions: false });
    let result = await embed(spec);
    let svg = chart.querySelector("svg");
    const over = svg ? svg.getBoundingClientRect().width - avail : 0;
    if (over > 1) {  // draw again with plots narrower by the overflow
      result.finalize();
      narrow(spec, over + 4);
      result = await embed(spec);
      svg = chart.querySelector("svg");
    }
    if (svg && svg.getBoundingClientRect().width > avail + 1) {  // still too wide: scale it
      const w = +svg.getAttribute("width"), h = +svg.getAttribute("height");
      if (!svg.getAttribute("viewBox")) svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
      svg.style.width = "100%";
      svg.style.height = "auto";
      svg.style.maxWidth = `${w}px`;
    }
    const view = result.view;
    try {  // the plot width for expressions that hide what would not fit (labels)
      let px = widest(spec) || 640;
      const s = chart.querySelector("svg"), drawn = s && s.getBoundingClientRect().width;
      if (drawn && +s.getAttribute("width") > drawn) px *= drawn / +s.getAttribute("width");
      view.signal("_px", px);
      await view.runAsync();
    } catch (e) { /* a figure without the parameter */ }
    const caption = captionOf(div);
    const show = () => {
      const id = view.signal("_id");
      const no = refused(rows, id), words = notesOf(rows, id);
      notes.replaceChildren(...(no ? words : []).map((w) => {
        const p = document.createElement("p");
        p.textContent = w;
        return p;
      }));
      div.classList.toggle("tpviz-refused", no);
      const s = chart.querySelector("svg");
      if (s) {
        s.setAttribute("role", "img");
        s.setAttribute("aria-label", label(caption, div, words));
      }
    };
    show();
    view.addSignalListener("_id", show);
    if (!window.tpvizNoWarm) await warm(view, spec);
    return { name: div.dataset.name, div: div, view: view };
  }

  window.tpvizLiveReady = (async function () {
    if (document.readyState === "loading") {
      await new Promise((done) => document.addEventListener("DOMContentLoaded", done));
    }
    for (const div of Array.from(document.querySelectorAll("div.tpviz-live"))) {
      window.tpvizLive.push(await draw(div));
    }
    return window.tpvizLive.length;
  })();
})();
