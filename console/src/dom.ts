// A tiny DOM helper: h("tag.class", {attr: value}, ...children). Text is
// always set as text (never parsed as HTML), so nothing the server sends can
// inject markup.

type Child = Node | string | number | null | undefined | false | Child[];

/** Creates an element: h("td.num", {title: "x"}, "text", otherNode). */
export function h(tag: string, attrs?: Record<string, string | boolean | ((e: Event) => void)> | null, ...children: Child[]): HTMLElement {
  const [name, ...classes] = tag.split(".");
  const el = document.createElement(name || "div");
  if (classes.length) el.className = classes.join(" ");
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else if (v === true) el.setAttribute(k, "");
    else if (v !== false) el.setAttribute(k, v);
  }
  append(el, children);
  return el;
}

function append(el: HTMLElement, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** Replaces the children of el. */
export function fill(el: HTMLElement, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** A table with a header row and body rows. */
export function table(cls: string, head: string[], rows: Child[][]): HTMLElement {
  return h("table." + cls, null,
    h("thead", null, h("tr", null, head.map((c) => h("th", null, c)))),
    h("tbody", null, rows.map((r) => h("tr", null, r.map((c) => h("td", null, c))))));
}

/** Shortens a digest for display; the full one is in the title. */
export function short(digest: string): HTMLElement {
  const s = digest.length > 19 ? digest.slice(0, 19) + "…" : digest;
  return h("code", { title: digest }, s || "—");
}
