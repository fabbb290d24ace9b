// capjudge item report: draws the items from the JSON above, then filters and sorts them in place.
// Every text from the runs goes in through textContent, never as HTML.
// The helpers (el, number, yesNo, facts, $) are page_common.js's, inlined before this script.

const REPORT = JSON.parse(document.getElementById("report-data").textContent);

// ---- drawing --------------------------------------------------------------------------------------------

function judgeLine(judge, index) {
  const parts = [`judge #${index + 1}: ${judge.name || "unknown judge"}`, `model ${judge.model || "not logged"}`];
  if (judge.version) parts.push(`version ${judge.version}`);
  if (judge.endpoint) parts.push(`endpoint ${judge.endpoint}`);
  return el("li", {}, parts.join(" · "), judge.settings ? el("div", {}, "settings ", el("code", { text: judge.settings })) : null);
}

function visualBlock(visual) {
  const block = el("div", { class: "visual" }, el("div", { class: "description", text: "The judge saw: " + visual.description }));
  if (visual.images.length === 1) {
    block.append(el("a", { href: visual.images[0] }, el("img", { class: "strip", src: visual.images[0], alt: "frames the judge saw" })));
  } else if (visual.images.length > 1) {
    block.append(el("div", { class: "thumbs" }, visual.images.map((src, i) =>
      el("a", { href: src }, el("img", { class: "thumb", src, alt: `frame ${i + 1} of ${visual.images.length}` })))));
  }
  if (visual.problem) block.append(el("p", { class: "problem frames-problem", text: visual.problem }));
  return block;
}

function scoresTable(rows) {
  if (!rows.length) return null;
  const withReadings = rows.some((r) => r.written !== null || r.expected !== null);
  const head = withReadings ? ["score", "used", "written", "expected"] : ["score", "value"];
  const notes = rows.filter((r) => r.note).map((r) => el("li", { text: `${r.name}: ${r.note}` }));
  return el("div", { class: "scores" },
    el("table", { class: "scores" },
      el("thead", {}, el("tr", {}, head.map((h) => el("th", { text: h })))),
      el("tbody", {}, rows.map((r) => el("tr", { "data-score": r.name },
        el("td", { text: r.name }), el("td", { text: number(r.value) }),
        withReadings ? el("td", { text: number(r.written) }) : null,
        withReadings ? el("td", { text: number(r.expected) }) : null)))),
    notes.length ? el("ul", { class: "score-notes" }, notes) : null);
}

function lengthFacts(length) {
  if (!length) return null;
  const words = `${number(length.output_words)} words against the reference's ${number(length.reference_words)}, ` +
    `tolerance ${number(length.tolerance_percent)}%`;
  const rule = length.rule_applies === false ? "does not apply to this caption type"
    : length.within_tolerance ? "within tolerance" : length.within_tolerance === false ? "outside tolerance" : "not checked";
  const cap = length.capped_by ? `capped by ${length.capped_by}: ${number(length.judge_score)} → ${number(length.final_score)}`
    : "no cap applied";
  const facts = [["length", words], ["length rule", rule], ["cap", cap]];
  if (length.restriction) facts.push(["restriction", `${length.restriction} (${yesNo(length.restriction_satisfied)})`]);
  return facts;
}

function replyBlock(reply, index, count) {
  const title = count > 1 ? `reply ${index + 1} of ${count}` : "judge reply";
  const summary = [title];
  if (reply.failure) summary.push(`failed: ${reply.failure}`);
  if (reply.cached !== null) summary.push(reply.cached ? "from cache" : "asked");
  return el("details", { class: "reply" }, el("summary", { text: summary.join(" · ") }),
    count > 1 ? scoresTable(reply.scores) : null,
    el("div", {}, el("strong", { text: "Reasoning" })),
    reply.reasoning ? el("pre", { class: "reasoning", text: reply.reasoning }) : el("p", { class: "empty", text: "no reasoning in this reply" }),
    el("div", {}, el("strong", { text: "Raw text" })),
    reply.raw !== null ? el("pre", { class: "raw", text: reply.raw }) : el("p", { class: "empty", text: "no reply text (none received or not logged)" }));
}

// What a judgment says below its heading: failure, scores, facts and (unless it is a panel's, which has no
// reply of its own) each reply. Laid out alike for a model's judge and for each member of a panel.
function judgmentBody(view, judge, withReplies) {
  const parts = [];
  if (view.failure) {
    parts.push(el("p", { class: "failure", text: `failed: ${view.failure}` + (view.failure_detail ? ` — ${view.failure_detail}` : "") }));
  }
  parts.push(scoresTable(view.scores) || el("span"));
  const pairs = lengthFacts(view.length) || [];
  pairs.push(["attempts", view.requests === null ? "not logged" : `${view.requests} HTTP requests (retries included)`]);
  pairs.push(["from the cache", yesNo(view.cached)]);
  if (view.spread !== null) pairs.push(["spread of k replies", number(view.spread)]);
  if (view.flags.length) pairs.push(["flags", view.flags.join(", ")]);
  pairs.push(["judge", `#${judge + 1}`]);
  parts.push(facts(pairs));
  if (withReplies) view.replies.forEach((reply, i) => parts.push(replyBlock(reply, i, view.replies.length)));
  return parts;
}

function judgmentCard(section, judgment) {
  const view = judgment.view;
  const card = el("div", { class: "judgment" + (view.failure ? " failed" : "") + (judgment.panel ? " panel" : ""),
    "data-model": judgment.model, "data-score": judgment.score === null ? "" : String(judgment.score) },
    el("h3", {}, el("span", { class: "model", text: judgment.model }),
      el("span", { class: "score", text: `${section.main_metric} ${number(judgment.score)}` })),
    view.caption !== null ? el("div", { class: "caption", text: view.caption }) : el("p", { class: "empty", text: "caption not logged" }),
    judgmentBody(view, judgment.judge, !judgment.panel));
  if (judgment.panel) card.append(panelBlock(section, judgment.panel));
  return card;
}

// A panel's judgment: the values above are its members' pooled; which members it pooled, which it left out
// and why, then each member's own judgment.
function panelBlock(section, panel) {
  const pooled = panel.members.filter((m) => m.pooled).map((m) => m.name);
  const leftOut = panel.members.filter((m) => !m.pooled).map((m) => `${m.name} (${m.left_out})`);
  return el("div", { class: "panel-judgment" },
    facts([["quorum", `${number(panel.quorum)} of ${panel.members.length} members`],
      ["pooled", pooled.length ? pooled.join(", ") : "none"], ["left out", leftOut.length ? leftOut.join(", ") : "none"]]),
    el("div", { class: "members" }, panel.members.map((member) => memberCard(section, member))));
}

function memberCard(section, member) {
  const view = member.view;
  return el("div", { class: "member" + (view.failure ? " failed" : "") + (member.pooled ? "" : " left-out"),
    "data-member": member.name, "data-score": member.score === null ? "" : String(member.score) },
    el("h4", {}, el("span", { class: "member-name", text: member.name }),
      el("span", { class: "member-model", text: member.model || "model not logged" }),
      el("span", { class: "score", text: `${section.main_metric}@${member.name} ${number(member.score)}` })),
    el("p", { class: "pooling" + (member.pooled ? " pooled" : " left-out"),
      text: member.pooled ? "pooled by the panel" : `left out by the panel: ${member.left_out}` }),
    judgmentBody(view, member.judge, true));
}

function failedIn(judgment) {
  return Boolean(judgment.view.failure) || Boolean(judgment.panel && judgment.panel.members.some((m) => m.view.failure));
}

function itemArticle(section, item, position) {
  const failedModels = item.judgments.filter((j) => j.view.failure).map((j) => j.model);
  const cappedModels = item.judgments.filter((j) => j.view.length && j.view.length.capped_by).map((j) => j.model);
  const leftOut = item.judgments.flatMap((j) => j.panel ? j.panel.members.filter((m) => !m.pooled).map((m) => `${j.model}@${m.name}`) : []);
  const head = el("div", { class: "item-head" },
    el("span", { class: "item-id", text: `item ${item.item_id}` }),
    item.caption_type ? el("span", { class: "tag", text: item.caption_type }) : null,
    failedModels.length ? el("span", { class: "tag bad", text: `failed: ${failedModels.join(", ")}` }) : null,
    leftOut.length ? el("span", { class: "tag warn left-out", text: `left out of the panel: ${leftOut.join(", ")}` }) : null,
    cappedModels.length ? el("span", { class: "tag warn", text: `length-capped: ${cappedModels.join(", ")}` }) : null,
    item.disagreement !== null ? el("span", { class: "tag", text: `disagreement ${number(item.disagreement)}` }) : null,
    item.spread !== null ? el("span", { class: "tag", text: `spread ${number(item.spread)}` }) : null);
  const article = el("article", { class: "item", id: `item-${section.task}-${item.item_id}`, "data-task": section.task,
    "data-item": item.item_id }, head,
    el("p", { class: "instruction" }, el("strong", { text: "Instruction: " }),
      item.instruction !== null ? item.instruction : el("span", { class: "empty", text: "not logged by this run" })),
    item.references.length ? el("ol", { class: "references" }, item.references.map((r) => el("li", { text: r })))
      : el("p", { class: "empty", text: "no references logged" }),
    visualBlock(item.visual),
    el("div", { class: "judgments" }, item.judgments.map((j) => judgmentCard(section, j))));
  article._item = item;
  article._position = position;
  return article;
}

// How a panel's members agreed over one run of the task, as the run aggregated it.
function agreementBlock(agreement) {
  const rows = [["alpha", `Krippendorff's alpha, all members (${agreement.level || "level not logged"})`, agreement.alpha]];
  for (const pair of agreement.pairs) {
    rows.push([`kendall_b:${pair.first}~${pair.second}`, `Kendall tau-b, ${pair.first} ~ ${pair.second}`, pair.kendall_b]);
  }
  for (const offset of agreement.offsets) {
    rows.push([`offset:${offset.member}`, `offset of ${offset.member} (mean member − panel)`, offset.offset]);
  }
  const members = agreement.members.map((m) => `${m.name} (${[m.model || "model not logged", m.endpoint].filter(Boolean).join(", ")})`);
  return el("div", { class: "panel-agreement", "data-model": agreement.model },
    el("h3", { text: `Panel agreement: ${agreement.model}` }),
    el("p", { class: "note", text: `${agreement.members.length} judges: ${members.join("; ")}. Quorum ${number(agreement.quorum)}` +
      (agreement.file ? `; panel file ${agreement.file}.` : ".") + " Intervals as the run computed them (item bootstrap); — where it had none." }),
    el("table", { class: "scores agreement" },
      el("thead", {}, el("tr", {}, ["figure", "value", "CI low", "CI high"].map((h) => el("th", { text: h })))),
      el("tbody", {}, rows.map(([key, label, figure]) => el("tr", { "data-figure": key },
        el("td", { text: label }), el("td", { text: number(figure.value, 3) }),
        el("td", { text: number(figure.ci_low, 3) }), el("td", { text: number(figure.ci_high, 3) }))))));
}

function sectionElement(section) {
  const node = el("section", { class: "task", id: `task-${section.task}`, "data-task": section.task },
    el("h2", { text: `${section.task} — ${section.items.length} items, ${section.models.length} runs` }),
    el("p", { class: "note", text: `Score: ${section.main_metric} (${section.higher_is_better ? "higher" : "lower"} is better). ` +
      `Runs: ${section.models.join(", ")}.` }),
    section.absent_models.length ? el("p", { class: "problem", text: `Not in this task (they ran other tasks): ${section.absent_models.join(", ")}.` }) : null,
    el("ul", { class: "judges" }, section.judges.map(judgeLine)),
    (section.panels || []).map(agreementBlock),
    el("p", { class: "note section-shown" }));
  const list = el("div", { class: "items" }, section.items.map((item, i) => itemArticle(section, item, i)));
  node.append(list);
  node._section = section;
  node._list = list;
  return node;
}

// ---- filters and sorting --------------------------------------------------------------------------------

function state() {
  return {
    task: $("filter-task").value, type: $("filter-type").value, model: $("filter-model").value,
    failed: $("filter-failed").checked, capped: $("filter-capped").checked, sort: $("sort").value,
  };
}

function considered(item, s) {
  return s.model ? item.judgments.filter((j) => j.model === s.model) : item.judgments;
}

function itemScore(item, s) {
  const scores = considered(item, s).map((j) => j.score).filter((v) => v !== null);
  return scores.length ? scores.reduce((a, b) => a + b, 0) / scores.length : null;
}

function sortKey(item, s) {
  if (s.sort === "score-desc" || s.sort === "score-asc") return itemScore(item, s);
  if (s.sort === "disagreement") return item.disagreement;
  if (s.sort === "spread") return item.spread;
  return null;
}

function apply() {
  const s = state();
  let shown = 0, total = 0;
  for (const node of document.querySelectorAll("section.task")) {
    const articles = Array.from(node._list.children);
    let visible = 0;
    for (const article of articles) {
      const item = article._item;
      const mine = considered(item, s);
      const show = (!s.task || s.task === item.task) && (!s.type || s.type === item.caption_type) && mine.length > 0 &&
        (!s.failed || mine.some(failedIn)) &&
        (!s.capped || mine.some((j) => j.view.length && j.view.length.capped_by));
      article.hidden = !show;
      for (const card of article.querySelectorAll(".judgment")) card.hidden = Boolean(s.model) && card.dataset.model !== s.model;
      visible += show ? 1 : 0;
    }
    const descending = s.sort !== "score-asc";
    articles.sort((a, b) => {
      const ka = sortKey(a._item, s), kb = sortKey(b._item, s);
      if (ka === null && kb === null) return a._position - b._position;
      if (ka === null) return 1;  // items without a value go last, whatever the direction
      if (kb === null) return -1;
      return (descending ? kb - ka : ka - kb) || a._position - b._position;
    });
    node._list.append(...articles);
    for (const block of node.querySelectorAll(".panel-agreement")) block.hidden = Boolean(s.model) && block.dataset.model !== s.model;
    node.hidden = Boolean(s.task) && s.task !== node._section.task;
    node.querySelector(".section-shown").textContent = `showing ${visible} of ${articles.length} items`;
    if (!node.hidden) { shown += visible; total += articles.length; }
  }
  $("shown").textContent = `${shown} of ${total} items shown`;
}

// `report.html#task=<task>&model=<model>`: what a leaderboard row links to.
function fromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  for (const [name, id] of [["task", "filter-task"], ["model", "filter-model"]]) {
    const wanted = params.get(name);
    if (wanted !== null && Array.from($(id).options).some((o) => o.value === wanted)) $(id).value = wanted;
  }
  apply();
  const task = params.get("task");
  const target = task && document.getElementById(`task-${task}`);
  if (target) target.scrollIntoView();
}

function options(select, values) {
  for (const value of values) select.append(el("option", { value, text: value }));
}

function main() {
  $("runs").textContent = "Runs: " + REPORT.runs.map((r) => `${r.name} (${r.results.join(", ")})`).join("; ");
  for (const warning of REPORT.warnings) $("warnings").append(el("li", { text: warning }));
  const items = REPORT.sections.flatMap((s) => s.items);
  options($("filter-task"), REPORT.sections.map((s) => s.task));
  options($("filter-type"), [...new Set(items.map((i) => i.caption_type).filter(Boolean))].sort());
  options($("filter-model"), [...new Set(REPORT.sections.flatMap((s) => s.models))]);
  $("sections").append(...REPORT.sections.map(sectionElement));
  for (const id of ["filter-task", "filter-type", "filter-model", "filter-failed", "filter-capped", "sort"]) {
    $(id).addEventListener("change", apply);
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
}

main();
