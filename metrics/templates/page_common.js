// Shared by capjudge's per-item pages (the item report, the sensitivity page): building elements and showing
// numbers. Every text from a file goes in through textContent (the `text` attribute), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function number(value, digits) {
  if (value === null || value === undefined) return "—";
  return Number.isInteger(value) ? String(value) : value.toFixed(digits === undefined ? 2 : digits);
}

function yesNo(value) {
  return value === null || value === undefined ? "not logged" : (value ? "yes" : "no");
}

function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
}
