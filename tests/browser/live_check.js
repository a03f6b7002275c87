// Moves every control of every live figure on the page (tpviz-live.js keeps the views in
// window.tpvizLive) and reports, per control, whether the figure changed and how long the
// update took: from the input event until the browser has painted the frame after the view
// re-ran and redrew its SVG (what the reader waits). A figure's first move is reported apart
// (`firstOnly`: only it). `tries`: values of another control tried where one changes nothing.
async ({ tries: budgetTries, firstOnly }) => {
  await window.tpvizLiveReady;
  const results = [];
  // the drawing without the ids Vega numbers afresh on each redraw (clip paths, gradients)
  const svgOf = (fig) => (fig.div.querySelector(".tpviz-notes") || {}).textContent +
    fig.div.querySelector("svg").outerHTML.replace(/(id="|url\(#|href="#)[^")]*/g, "");
  const controlsOf = (fig) => Array.from(fig.div.querySelectorAll(".vega-bindings select, " +
    ".vega-bindings input"));
  const valuesOf = (el) => el.tagName === "SELECT"
    ? Array.from(el.options).map((o, i) => i)
    : (() => { const v = []; const lo = +el.min, hi = +el.max, st = +el.step || 1;
               for (let x = lo; x <= hi + 1e-9; x += st) v.push(x); return v; })();
  const current = (el) => el.tagName === "SELECT" ? el.selectedIndex : +el.value;
  async function set(fig, el, value) {
    const t0 = performance.now();
    if (el.tagName === "SELECT") { el.selectedIndex = value; el.dispatchEvent(new Event("change")); }
    else { el.value = value; el.dispatchEvent(new Event("input")); el.dispatchEvent(new Event("change")); }
    await fig.view.runAsync();
    await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
    return performance.now() - t0;
  }
  for (const fig of window.tpvizLive) {
    const controls = controlsOf(fig);
    // the first move on a fresh page: the first control to a value it does not start at
    if (controls.length) {
      const el = controls[0], start = current(el);
      const other = valuesOf(el).find((v) => v !== start);
      if (other !== undefined) {
        const ms = await set(fig, el, other);
        await set(fig, el, start);
        results.push({ figure: fig.name, control: "(first move)", changed: true, first: true,
                       ms: [ms], restored: true });
      }
    }
    if (firstOnly) continue;
    if (controls.length === 0) results.push({ figure: fig.name, control: null, changed: false, ms: [] });
    for (const el of controls) {
      const name = (el.closest(".vega-bind") || el.parentElement).textContent.trim() || el.name;
      const words = (f) => Array.from(f.div.querySelectorAll("svg text"))
        .map((t) => t.textContent).sort().join("|");
      const start = current(el), before = svgOf(fig), beforeWords = words(fig), times = [];
      let changed = false;
      // this control alone, the others where they are
      for (const v of valuesOf(el)) {
        if (v === start) continue;
        const ms = await set(fig, el, v);
        if (svgOf(fig) !== before) { changed = true; times.push(ms); }
      }
      await set(fig, el, start);
      // else: is there a setting of another control where this one matters?
      for (const other of changed ? [] : controls.filter((o) => o !== el)) {
        const otherStart = current(other);
        for (const w of valuesOf(other).slice(0, budgetTries)) {
          await set(fig, other, w);
          const base = svgOf(fig);
          for (const v of valuesOf(el)) {
            if (v === start) continue;
            const ms = await set(fig, el, v);
            if (svgOf(fig) !== base) { changed = true; times.push(ms); break; }
          }
          await set(fig, el, start);
          if (changed) break;
        }
        await set(fig, other, otherStart);
        if (changed) break;
      }
      results.push({ figure: fig.name, control: name, changed: changed, ms: times,
                     // back at the start, it says the same again (axes may re-tick)
                     restored: words(fig) === beforeWords });
    }
  }
  return results;
}
