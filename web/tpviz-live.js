// Draws the book's live figures (tpviz.core.live): each <div class="tpviz-live"> holds a
// Vega-Lite spec with its data precomputed by the library at build time. The Vega scripts are
// served from the book's own files. Views are kept in window.tpvizLive for the browser test.
window.tpvizLive = [];
window.tpvizLiveReady = (async function () {
  if (document.readyState === "loading") {
    await new Promise((done) => document.addEventListener("DOMContentLoaded", done));
  }
  const figures = Array.from(document.querySelectorAll("div.tpviz-live"));
  for (const div of figures) {
    const spec = JSON.parse(div.querySelector('script[type="application/json"]').textContent);
    const result = await vegaEmbed(div, spec, { renderer: "svg", actions: false });
    window.tpvizLive.push({ name: div.dataset.name, div: div, view: result.view });
  }
  return window.tpvizLive.length;
})();
