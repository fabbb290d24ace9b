// capjudge arena page: per battle (item, pair of models), both captions and, per judge, both orders' verdicts on
// every dimension with the replies; a verdict that changed with the order is marked, a failed order is shown
// failed (never as a tie). The helpers (el, number, $) are page_common.js's, inlined before this script; every
// text from the file goes in through textContent.

const REPORT = JSON.parse(document.getElementById("report-data").textContent);

function interval(triple) {
  const [value, low, high] = triple;
  if (value === null) return "—";
  const fixed = (x) => x.toFixed(2);  // shares and fairness, as the report's Markdown writes them
  return low === null ? fixed(value) : `${fixed(value)} [${fixed(low)}, ${fixed(high)}]`;
}

function rankingText(pairs) {
  return pairs.map(([model, elo]) => `${model} ${Math.round(elo)}`).join(", ");
}

function runLine() {
  const parts = [`task ${REPORT.task}`, `judge ${REPORT.judge}`, `models: ${REPORT.models.join(", ")}`,
    `${REPORT.battles.length} battles`, `from ${REPORT.file}`];
  $("run").append(parts.join(" · "), REPORT.command ? el("div", {}, "command ", el("code", { text: REPORT.command })) : null);
}

function summary() {
  const ci = `${Math.round(100 * REPORT.confidence)}% CI`;
  $("summary").append(el("h2", { text: "Position bias and ranking per judge (overall verdicts)" }),
    el("table", { class: "bias" },
      el("thead", {}, el("tr", {}, ["judge", "pairs", "failed orders", `position consistency [${ci}]`,
        "preference fairness", "order-flipped share", "position-inconsistent ties", "ranking (Elo)",
        "length-controlled (Elo)"].map((h) => el("th", { text: h })))),
      el("tbody", {}, REPORT.summary.map((row) => el("tr", { "data-member": row.member },
        el("td", { text: `${row.member} (${row.judge_model})` }), el("td", { class: "num", text: number(row.pairs) }),
        el("td", { class: "num", text: number(row.failed_orders) }),
        el("td", { class: "num consistency", text: interval(row.consistency) }),
        el("td", { class: "num fairness", text: interval(row.fairness) }),
        el("td", { class: "num flipped", text: interval(row.flipped) }),
        el("td", { class: "num", text: number(row.inconsistent_ties) }),
        el("td", { class: "ranking", text: row.ranking.length ? rankingText(row.ranking) : `none: ${row.no_ranking}` }),
        el("td", { class: "length-controlled", text: row.length_controlled.length ? rankingText(row.length_controlled) : "—" }))))),
    el("p", { class: "note", text: "Preference fairness < 0: the judge prefers the caption shown first; > 0 the one " +
      "shown second. A verdict that changes with the order counts as a tie in the ranking; a failed order makes no battle." }));
}

// ---- one battle -------------------------------------------------------------------------------------------

function verdictCell(battle, judgment, order, dimension, aFirst) {
  const verdict = order.verdicts[dimension];
  const consistent = judgment.consistent[dimension];
  const winner = verdict === "A" ? battle.model_a : verdict === "B" ? battle.model_b : null;
  const shownFirst = (verdict === "A") === aFirst;
  const td = el("td", { class: "verdict" + (consistent === false ? " inconsistent" : ""), "data-dimension": dimension,
    "data-verdict": verdict, "data-consistent": String(consistent) },
    el("span", { class: "winner", text: winner === null ? "tie" : winner }),
    winner === null ? null : el("span", { class: "position", text: shownFirst ? "(shown first)" : "(shown second)" }));
  if (consistent === false) td.append(el("span", { class: "mark", text: "✗ changed with the order" }));
  return td;
}

function replyCell(order) {
  if (order.reply === null) return el("td", { class: "reply empty", text: "no reply received" });
  const excerpt = order.reply.length > 60 ? order.reply.slice(0, 60) + "…" : order.reply;
  return el("td", { class: "reply" }, el("details", {}, el("summary", { text: excerpt }), el("pre", { text: order.reply })));
}

function orderRow(battle, judgment, aFirst, first) {
  const order = aFirst ? judgment.a_first : judgment.b_first;
  const label = `${aFirst ? battle.model_a : battle.model_b}'s caption shown first` + (order.cache_hit ? " (from the cache)" : "");
  const cells = order.verdicts === null
    ? [el("td", { class: "failed", colspan: String(judgment.dimensions.length), "data-failure": order.failure,
      text: `failed: ${order.failure}` + (order.failure_detail ? ` — ${order.failure_detail}` : "") })]
    : judgment.dimensions.map((d) => verdictCell(battle, judgment, order, d, aFirst));
  return el("tr", { class: "order" + (first ? " judge-row" : ""), "data-order": aFirst ? "a_first" : "b_first",
    "data-failed": String(order.verdicts === null) },
    first ? el("td", { class: "member", rowspan: "3", text: `${judgment.member} (${judgment.judge_model})` }) : null,
    el("td", { class: "order-label", text: label }), cells, replyCell(order));
}

function rankingRow(battle, judgment) {
  const decided = judgment.for_ranking;
  const text = decided === null ? "no battle: an order failed"
    : decided === "tie" ? (judgment.consistent.overall === false ? "tie: position-inconsistent" : "tie")
      : `${decided === "A" ? battle.model_a : battle.model_b} wins`;
  return el("tr", { class: "for-ranking", "data-for-ranking": decided === null ? "none" : decided },
    el("td", { class: "order-label", text: "for the ranking (overall)" }),
    el("td", { colspan: String(judgment.dimensions.length + 1), text }));
}

function battleArticle(battle, s) {
  const judgments = battle.judgments.filter((j) => !s.member || j.member === s.member);
  const inconsistent = judgments.filter((j) => Object.values(j.consistent).includes(false)).length;
  const failed = judgments.some((j) => j.a_first.verdicts === null || j.b_first.verdicts === null);
  const words = (key) => (battle.length[key] === undefined ? "" : `${battle.length[key]} words`);
  return el("article", { class: "item battle", "data-item": battle.item_id, "data-model-a": battle.model_a,
    "data-model-b": battle.model_b, "data-inconsistent": String(inconsistent > 0), "data-failed": String(failed) },
    el("div", { class: "item-head" }, el("span", { class: "item-id", text: `item ${battle.item_id}` }),
      battle.cluster !== battle.item_id ? el("span", { class: "tag", text: `clip ${battle.cluster}` }) : null,
      el("span", { class: "tag", text: `${battle.model_a} vs ${battle.model_b}` }),
      inconsistent ? el("span", { class: "tag bad inconsistent-tag", text: `position-inconsistent: ${inconsistent} of ${judgments.length} judges` }) : null,
      failed ? el("span", { class: "tag bad failed-tag", text: "an order failed" }) : null),
    el("div", { class: "pair" }, [["model_a", "caption_a", "words_a"], ["model_b", "caption_b", "words_b"]].map(([m, c, w]) =>
      el("div", { class: "side", "data-side": m }, el("h3", { text: battle[m] }),
        el("div", { class: "caption", text: battle[c] }), el("div", { class: "words", text: words(w) })))),
    el("table", { class: "orders" },
      el("thead", {}, el("tr", {}, ["judge", "order", ...(judgments[0] ? judgments[0].dimensions : []), "reply"]
        .map((h) => el("th", { text: h })))),
      judgments.map((j) => el("tbody", { "data-member": j.member },
        orderRow(battle, j, true, true), orderRow(battle, j, false, false), rankingRow(battle, j)))));
}

// ---- filters ----------------------------------------------------------------------------------------------

function state() {
  return { member: $("filter-member").value, model: $("filter-model").value,
    inconsistent: $("filter-inconsistent").checked, failed: $("filter-failed").checked };
}

function shownBattle(battle, s) {
  if (s.model && battle.model_a !== s.model && battle.model_b !== s.model) return false;
  const judgments = battle.judgments.filter((j) => !s.member || j.member === s.member);
  if (s.inconsistent && !judgments.some((j) => Object.values(j.consistent).includes(false))) return false;
  if (s.failed && !judgments.some((j) => j.a_first.verdicts === null || j.b_first.verdicts === null)) return false;
  return judgments.length > 0;
}

function draw() {
  const s = state();
  const shown = REPORT.battles.filter((battle) => shownBattle(battle, s));
  $("battles").replaceChildren(...shown.map((battle) => battleArticle(battle, s)));
  $("shown").textContent = `${shown.length} of ${REPORT.battles.length} battles shown`;
}

function main() {
  runLine();
  summary();
  for (const member of REPORT.members) $("filter-member").append(el("option", { value: member, text: member }));
  for (const model of REPORT.models) $("filter-model").append(el("option", { value: model, text: model }));
  for (const id of ["filter-member", "filter-model", "filter-inconsistent", "filter-failed"]) $(id).addEventListener("change", draw);
  draw();
}

main();
