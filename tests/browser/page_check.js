// What a reader sees on one page, measured (tests/browser/test_book.py asserts on it): each
// live chart's width against its container and any text it cuts with "…"; the contrast of its
// text against what lies under it, and of its marks against the background; each static
// figure's shown width against its natural width, and its alt text; code cells that scroll
// sideways.
async () => {
  await window.tpvizLiveReady;
  // an opaque colour as [r, g, b]; null for none or a transparent one (rgba(..., 0))
  const rgb = (s) => { const m = (s || "").match(/[\d.]+/g);
    return m && m.length >= 3 && !(m.length > 3 && +m[3] === 0) ? m.slice(0, 3).map(Number) : null; };
  const lum = ([r, g, b]) => { const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const contrast = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const painted = (el, prop) => { const v = getComputedStyle(el)[prop]; const op = +getComputedStyle(el)[prop + "Opacity"];
    return v && v !== "none" && op !== 0 ? rgb(v) : null; };
  const white = [255, 255, 255];
  const live = window.tpvizLive.map((f) => {
    const svg = f.div.querySelector("svg");
    const shown = svg && getComputedStyle(svg).display !== "none";
    const texts = shown ? Array.from(svg.querySelectorAll("text")).filter((t) => t.textContent.trim()) : [];
    const low = [];
    for (const t of texts) {
      const fg = painted(t, "fill"); if (!fg) continue;
      let r = t.getBoundingClientRect(); if (!r.width) continue;
      if (r.top < 0 || r.bottom > window.innerHeight) {  // off screen: nothing is found under it
        t.scrollIntoView({ block: "center" });
        r = t.getBoundingClientRect();
      }
      const under = document.elementsFromPoint(r.x + r.width / 2, r.y + r.height / 2)
        .find((e) => e !== t && svg.contains(e) && e.tagName === "path" && painted(e, "fill"));
      const bg = under ? painted(under, "fill") : white;
      const c = contrast(fg, bg);
      if (c < 4.5) low.push(`${t.textContent.slice(0, 20)} ${c.toFixed(2)}:1`);
    }
    const pale = [];
    for (const p of shown ? svg.querySelectorAll("g.mark-rect path, g.mark-symbol path, g.mark-arc path") : []) {
      const fill = painted(p, "fill"), stroke = painted(p, "stroke");
      const sw = parseFloat(getComputedStyle(p).strokeWidth) || 0;
      const best = Math.max(fill ? contrast(fill, white) : 1, stroke && sw > 0 ? contrast(stroke, white) : 1);
      if (fill && best < 3) pale.push(`${getComputedStyle(p).fill} ${best.toFixed(2)}:1`);
    }
    return { name: f.name, container: f.div.getBoundingClientRect().width,
             chart: svg ? svg.getBoundingClientRect().width : 0,
             truncated: texts.map((t) => t.textContent).filter((s) => s.endsWith("…")),
             lowContrast: low.slice(0, 5), paleMarks: Array.from(new Set(pale)).slice(0, 5),
             label: svg ? svg.getAttribute("aria-label") || "" : "" };
  });
  const images = Array.from(document.querySelectorAll("article img")).filter((i) => i.naturalWidth > 0 &&
    i.closest("div.cell_output")).map((i) => ({ src: i.getAttribute("src").slice(-48), alt: i.alt,
      shown: i.getBoundingClientRect().width, natural: i.naturalWidth }));
  const code = Array.from(document.querySelectorAll("div.cell_input pre"));
  const outputs = Array.from(document.querySelectorAll("div.cell_output"));
  return { live, images,
           code: { total: code.length, scrolling: code.filter((p) => p.scrollWidth > p.clientWidth + 1).length },
           wideOutputs: outputs.filter((o) => o.scrollWidth > o.clientWidth + 1 &&
             !o.querySelector("div.tpviz-live")).length };
}
