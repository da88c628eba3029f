(() => {
  const doc = window.document;
  for (const el of [doc.scrollingElement, ...doc.querySelectorAll('[data-testid="stMain"]')]) if (el) el.scrollTop = 0;
})();
