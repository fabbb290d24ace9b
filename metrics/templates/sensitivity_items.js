// capjudge sensitivity page: per item, the original caption and each perturbed caption with every scorer's
// judgment, the shift of each score against the original, and a mark where the judge moved the wrong way.
// The helpers (el, number, facts, $) are page_common.js's, inlined before this script; every text from the
// file goes in through textContent.

const REPORT = JSON.parse(document.getElementById("report-data").textContent);

// Maps, not plain objects: a name from the file ("constructor", "__proto__") must never find an Object method.
const DIRECTION_WORDS = new Map([["down", "should drop"], ["not_up", "should not rise"], ["up", "should rise"],
  ["not_down", "should not drop"]]);

function directionWords(direction) {
  return DIRECTION_WORDS.get(direction) || direction;
}

function signed(value) {
  if (value === null || value === undefined) return "—";
  return (value > 0 ? "+" : "") + number(value);
}

function expectationText(pairs) {
  const named = pairs.filter(([d]) => d !== "*").map(([d, dir]) => `${d} ${directionWords(dir)}`);
  const rest = pairs.filter(([d]) => d === "*").map(([, dir]) => `${named.length ? "every other score" : "every score"} ${directionWords(dir)}`);
  return [...named, ...rest].join("; ");
}

// ---- the run and its shift table --------------------------------------------------------------------------

function runLine() {
  const parts = [`task ${REPORT.task}`, `judge ${REPORT.judge}`, `scorers: ${REPORT.scorers.join(", ")}`,
    `${REPORT.items.length} items`, `seed ${number(REPORT.seed)}`, `${number(REPORT.n_resamples)} resamples`,
    `from ${REPORT.file} (format ${REPORT.format_version})`];
  $("run").append(parts.join(" · "), REPORT.command ? el("div", {}, "command ", el("code", { text: REPORT.command })) : null);
}

function summary() {
  const node = $("summary");
  node.append(el("h2", { text: "Shifts over all items (perturbed − original; as the file reports them)" }));
  for (const scorer of REPORT.scorers) {
    const rows = REPORT.shifts.filter((s) => s.scorer === scorer);
    node.append(el("h3", { text: scorer }), el("table", { class: "shifts", "data-scorer": scorer },
      el("thead", {}, el("tr", {}, ["perturbation", "score", "expected", "mean shift", "CI", "moved the wrong way",
        "verdict", "passes", "pairs"].map((h) => el("th", { text: h })))),
      el("tbody", {}, rows.map((s) => el("tr", { class: s.passed === false ? "failed" : "",
        "data-perturbation": s.perturbation, "data-dimension": s.dimension },
        el("td", { text: s.perturbation }), el("td", { text: s.dimension }),
        el("td", { text: s.expected ? directionWords(s.expected) : (s.not_measured ? `not measured: ${s.not_measured}` : "not measured") }),
        el("td", { class: "num", text: signed(s.mean_shift) }),
        el("td", { class: "num", text: s.ci[0] === null ? "—" : `[${signed(s.ci[0])}, ${signed(s.ci[1])}]` }),
        el("td", { class: "num", text: s.share_wrong_way === null ? "—" : `${Math.round(100 * s.share_wrong_way)}%` }),
        el("td", { text: s.verdict || "—" }),
        el("td", { text: s.passed === null ? "—" : (s.passed ? "yes" : "NO") }),
        el("td", { class: "num", text: `${number(s.n_candidates)} (${number(s.n_left_out)} left out` +
          (s.n_unchanged ? `, ${number(s.n_unchanged)} unchanged)` : ")") }))))));
  }
  const unchanged = Object.entries(REPORT.unchanged).filter(([, n]) => n > 0);
  if (unchanged.length) {
    const total = unchanged.reduce((sum, [, n]) => sum + n, 0);
    node.append(el("p", { class: "note unchanged-note", text: `${total} perturbed captions changed nothing (` +
      unchanged.map(([name, n]) => `${name} ${n}`).join(", ") + "): not tests of the judge, left out of the shifts." }));
  }
  const legend = $("legend");
  legend.append(el("h2", { text: "The perturbations" }), el("dl", { class: "facts" }, REPORT.perturbations.map((p) => [
    el("dt", { text: p.name }), el("dd", { text: `${p.describe}. A sound judge: ${expectationText(p.expectations)}.` })])));
}

// ---- one item ---------------------------------------------------------------------------------------------

function outcomeCell(judgment) {
  if (judgment.failure) {
    return el("td", { class: "outcome failed", text: `failed: ${judgment.failure}` +
      (judgment.failure_detail ? ` — ${judgment.failure_detail}` : "") });
  }
  const cell = el("td", { class: "outcome", text: "judged" + (judgment.cache_hit ? " (from the cache)" : "") });
  if (judgment.pooled) {
    const left = judgment.not_pooled.map(([member, kind]) => `${member} (${kind})`);
    cell.append(el("div", { class: "change", text: `pooled: ${judgment.pooled.join(", ") || "none"}` +
      (left.length ? `; left out: ${left.join(", ")}` : "") }));
  }
  return cell;
}

function scoreCell(judgment, cell, perturbed, unchanged) {
  const classes = ["score"];
  if (cell.wrong_way) classes.push("wrong-way");
  else if (cell.sound) classes.push("sound");
  if (cell.value === null && judgment.failure) classes.push("not-judged");
  const td = el("td", { class: classes.join(" "), "data-dimension": cell.dimension,
    "data-value": cell.value === null ? "" : String(cell.value), "data-wrong-way": String(cell.wrong_way) },
    el("span", { class: "value", text: cell.value !== null ? number(cell.value) : (judgment.failure ? "not judged" : "—") }));
  if (perturbed) {
    const expected = cell.expected ? ` (${directionWords(cell.expected)})` : "";
    td.append(el("span", { class: "shift", "data-shift": cell.shift === null ? "" : String(cell.shift),
      text: unchanged ? "unchanged: no test" : cell.shift === null ? "shift not measured" : `shift ${signed(cell.shift)}${expected}` }));
    if (cell.wrong_way) td.append(el("span", { class: "mark", text: "✗ wrong way" }));
  }
  return td;
}

function replyCell(judgment) {
  if (judgment.role === "panel") return el("td", { class: "reply empty", text: "none of its own: its members' combined" });
  if (!judgment.reply_logged) return el("td", { class: "reply empty", text: "not in this file (format 1 logged no replies)" });
  if (judgment.reply === null) return el("td", { class: "reply empty", text: "no reply received" });
  const excerpt = judgment.reply.length > 60 ? judgment.reply.slice(0, 60) + "…" : judgment.reply;
  return el("td", { class: "reply" }, el("details", {}, el("summary", { text: excerpt }), el("pre", { text: judgment.reply })));
}

const PERTURBATION = new Map(REPORT.perturbations.map((p) => [p.name, p]));

function captionCell(caption, rows) {
  const label = caption.perturbation === null ? "original" : caption.perturbation;
  const expected = caption.perturbation === null ? "" : expectationText(PERTURBATION.get(caption.perturbation).expectations);
  return el("td", { class: "caption-cell", rowspan: String(rows) }, el("strong", { class: "label", text: label }),
    el("div", { class: "caption-text", text: caption.text }),
    caption.change && !caption.unchanged ? el("div", { class: "change", text: caption.change }) : null,
    caption.unchanged ? el("div", { class: "expected-line unchanged",
      text: "changed nothing: the original again, no test of the judge (left out of the shifts)" })
      : caption.perturbation !== null ? el("div", { class: "expected-line",
        text: expected ? `a sound judge: ${expected}` : "no expectation for these scores" }) : null);
}

function captionRows(item, caption, scorers) {
  const judgments = caption.judgments.filter((j) => scorers.includes(j.scorer));
  const perturbed = caption.perturbation !== null;
  return el("tbody", { class: perturbed ? "variant" : "original", "data-perturbation": caption.perturbation || "",
    "data-unchanged": String(Boolean(caption.unchanged)) },
    judgments.map((judgment, i) => el("tr", { class: `scorer-${judgment.role}`, "data-scorer": judgment.scorer },
      i === 0 ? captionCell(caption, judgments.length) : null,
      el("td", { class: "scorer", text: judgment.role === "panel" ? `${judgment.scorer} (combined)` : judgment.scorer }),
      outcomeCell(judgment),
      judgment.cells.map((cell) => scoreCell(judgment, cell, perturbed, caption.unchanged)),
      replyCell(judgment))));
}

function itemArticle(item, s) {
  const captions = item.captions.filter((c) => c.perturbation === null || !s.perturbation || c.perturbation === s.perturbation);
  return el("article", { class: "item", id: `item-${item.item_id}`, "data-item": item.item_id },
    el("div", { class: "item-head" }, el("span", { class: "item-id", text: `item ${item.item_id}` }),
      item.cluster !== item.item_id ? el("span", { class: "tag", text: `clip ${item.cluster}` }) : null,
      wrongIn(item, s).length ? el("span", { class: "tag bad", text: `moved the wrong way: ${wrongIn(item, s).length}` }) : null,
      failedIn(item, s) ? el("span", { class: "tag bad", text: "has unjudged captions" }) : null),
    el("table", { class: "pairs" },
      el("thead", {}, el("tr", {}, ["caption", "scorer", "outcome", ...item.dimensions, "reply"].map((h) => el("th", { text: h })))),
      captions.map((caption) => captionRows(item, caption, s.scorers))));
}

// ---- filters ----------------------------------------------------------------------------------------------

function state() {
  const scorer = $("filter-scorer").value;
  return { perturbation: $("filter-perturbation").value, scorers: scorer ? [scorer] : REPORT.scorers,
    wrong: $("filter-wrong").checked, failed: $("filter-failed").checked };
}

function inScope(item, s) {
  return item.captions.filter((c) => c.perturbation === null || !s.perturbation || c.perturbation === s.perturbation)
    .flatMap((c) => c.judgments.filter((j) => s.scorers.includes(j.scorer)).map((j) => [c, j]));
}

function wrongIn(item, s) {
  return inScope(item, s).flatMap(([, j]) => j.cells.filter((cell) => cell.wrong_way));
}

function failedIn(item, s) {
  return inScope(item, s).some(([, j]) => j.failure);
}

function draw() {
  const s = state();
  const shown = REPORT.items.filter((item) => (!s.wrong || wrongIn(item, s).length) && (!s.failed || failedIn(item, s)));
  $("items").replaceChildren(...shown.map((item) => itemArticle(item, s)));
  $("shown").textContent = `${shown.length} of ${REPORT.items.length} items shown`;
}

function main() {
  runLine();
  summary();
  for (const p of REPORT.perturbations) $("filter-perturbation").append(el("option", { value: p.name, text: p.name }));
  for (const scorer of REPORT.scorers) $("filter-scorer").append(el("option", { value: scorer, text: scorer }));
  for (const id of ["filter-perturbation", "filter-scorer", "filter-wrong", "filter-failed"]) $(id).addEventListener("change", draw);
  draw();
}

main();
