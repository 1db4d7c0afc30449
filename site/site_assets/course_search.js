// Search snippets from the page's text, not from its navigation. Sphinx cuts the snippet out of
// the text of the whole [role="main"] element, which in this theme also holds the page's table
// of contents (for printing), its header and footer: the first hit was usually a section title
// in that list. Those parts are removed before Sphinx looks for the hit.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return;   // not the search page
  const original = Search.htmlToText;
  const notText = ".onlyprint, #jb-print-docs-body, .bd-header-article, .bd-sidebar-secondary, " +
                  "#searchbox, nav, footer, .prev-next-area";
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(notText).forEach((el) => el.remove());
    return original(doc.documentElement.outerHTML, anchor);
  };
});
