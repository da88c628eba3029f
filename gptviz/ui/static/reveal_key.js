// R reveals the answer of a lesson's question. Streamlit keeps R (rerun) and C (clear caches) for itself and
// refuses them as button shortcuts, so this listener, installed once per page, takes R first (capture phase)
// while an enabled Reveal button is on the page, and clicks it; anywhere else R keeps its usual meaning.
if (!window.__gptvizRevealKey) {
  window.__gptvizRevealKey = true;
  window.addEventListener("keydown", (e) => {
    if (e.key !== "r" && e.key !== "R") return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.isContentEditable)) return;
    const doc = window.document;
    const button = [...doc.querySelectorAll("button")].find(
      (b) => b.innerText.trim() === "Reveal" && !b.disabled);
    if (!button) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    button.click();
  }, true);
}
