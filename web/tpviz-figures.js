// The book's static figures: click one to see it at its natural size (dense Gantt charts and
// animations are drawn wider than the column), and pause or play each animation.
(function () {
  function enlarge(img) {
    const over = document.createElement("div");
    over.className = "tpviz-enlarged";
    over.setAttribute("role", "dialog");
    over.setAttribute("aria-label", "Enlarged figure (click or press Escape to close)");
    const big = document.createElement("img");
    big.src = img.src;
    big.alt = img.alt;
    over.appendChild(big);
    const close = () => { over.remove(); document.removeEventListener("keydown", onKey); };
    const onKey = (e) => { if (e.key === "Escape") close(); };
    over.addEventListener("click", close);
    document.addEventListener("keydown", onKey);
    document.body.appendChild(over);
  }

  // an animated GIF cannot be stopped: pausing shows a still of its current frame instead
  function pauseButton(img) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "tpviz-pause";
    button.textContent = "⏸ pause animation";
    button.setAttribute("aria-pressed", "false");
    let still = null;
    button.addEventListener("click", () => {
      if (still) {
        still.replaceWith(img);
        still = null;
        button.textContent = "⏸ pause animation";
        button.setAttribute("aria-pressed", "false");
        return;
      }
      const canvas = document.createElement("canvas");
      canvas.width = img.naturalWidth;
      canvas.height = img.naturalHeight;
      still = document.createElement("img");
      try {
        canvas.getContext("2d").drawImage(img, 0, 0);
        still.src = canvas.toDataURL("image/png");
      } catch (e) {  // a page opened from disk may not read its own image back: hide it
        still.src = "data:image/gif;base64,R0lGODlhAQABAAAAACw=";
        still.style.width = img.width + "px";
        still.style.height = img.height + "px";
      }
      still.alt = img.alt + " (paused)";
      still.className = img.className;
      still.addEventListener("click", () => enlarge(still));
      img.replaceWith(still);
      button.textContent = "▶ play animation";
      button.setAttribute("aria-pressed", "true");
    });
    img.after(button);
  }

  function setUp() {
    for (const img of document.querySelectorAll("div.cell_output img")) {
      img.addEventListener("click", () => enlarge(img));
      const gif = /\.gif($|\?)/i.test(img.getAttribute("src") || "") ||
        (img.getAttribute("src") || "").startsWith("data:image/gif");
      if (gif) pauseButton(img);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp);
  else setUp();
})();
