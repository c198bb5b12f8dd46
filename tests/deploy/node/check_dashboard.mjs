// Checks deploy/grafana/ offline: outboxd.json is a dashboard Grafana can provision
// (provisioning/dashboards.yaml), with one datasource variable that every panel and
// query variable uses, one row per concern in a fixed order, and on every panel at
// least one PromQL query whose metric names are documented relay metrics
// (docs/operations.md, "Metrics and alerts"). tests/deploy/check_alerts_fire.sh checks
// the same queries against a running relay and a real Prometheus.
//
//   node check_dashboard.mjs SOURCE_DIR
import { readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { panelQueries } from "./dashboard_queries.mjs";
import { readYamlDocuments } from "./kustomize.mjs";

const ROWS = ["Throughput", "Oldest unacknowledged event", "Commit to acknowledgement latency",
              "Slot lag and WAL", "Dead letters", "Producer errors", "Standby state"];

export function dashboardProblems(dashboard, readme, provisioning) {
  const problems = [];
  const fail = (m) => problems.push(m);
  if (!dashboard.uid || !dashboard.title || !Number.isInteger(dashboard.schemaVersion)) {
    fail("needs uid, title and an integer schemaVersion");
  }
  const vars = dashboard.templating?.list ?? [];
  const sources = vars.filter((v) => v.type === "datasource");
  if (sources.length !== 1 || sources[0].query !== "prometheus") {
    fail("needs exactly one datasource variable, of type prometheus");
  }
  const ds = `\${${sources[0]?.name}}`;
  for (const v of vars.filter((x) => x.type === "query")) {
    if (v.datasource?.uid !== ds) fail(`variable ${v.name} does not use ${ds}`);
  }
  const rows = dashboard.panels.filter((p) => p.type === "row").map((p) => p.title);
  if (JSON.stringify(rows) !== JSON.stringify(ROWS)) {
    fail(`rows ${JSON.stringify(rows)}, want one per concern: ${JSON.stringify(ROWS)}`);
  }
  const ids = new Set();
  let row = null;
  const perRow = new Map();
  for (const p of dashboard.panels) {
    if (ids.has(p.id)) fail(`panel id ${p.id} used twice`);
    ids.add(p.id);
    const g = p.gridPos;
    if (!g || !(g.w > 0 && g.h > 0 && g.x >= 0 && g.x + g.w <= 24)) fail(`panel ${p.title}: bad gridPos`);
    if (p.type === "row") { row = p.title; perRow.set(row, 0); continue; }
    if (row === null) fail(`panel ${p.title} is above the first row`);
    perRow.set(row, perRow.get(row) + 1);
    if (p.datasource?.uid !== ds) fail(`panel ${p.title} does not use ${ds}`);
    const targets = (p.targets ?? []).filter((t) => t.expr);
    if (targets.length === 0) fail(`panel ${p.title} has no query`);
    for (const t of targets) if (t.datasource?.uid !== ds) fail(`panel ${p.title}: a query does not use ${ds}`);
  }
  for (const [r, n] of perRow) if (n === 0) fail(`row ${r} has no panel`);
  // Offline, the names must at least be documented ones; the live check is stricter.
  const documented = new Set([...readme.matchAll(/`(outboxd_[a-z_]+)(?:\{[^`]*\})?`/g)].map((m) => m[1]));
  for (const q of panelQueries(dashboard)) {
    for (const name of q.metrics) {
      const family = name.replace(/_(bucket|sum|count)$/, "");
      if (name !== "up" && !documented.has(name) && !documented.has(family)) {
        fail(`${q.panel}: ${name} is not a metric docs/operations.md "Metrics and alerts" lists`);
      }
    }
  }
  const providers = provisioning.providers ?? [];
  if (provisioning.apiVersion !== 1 || providers.length !== 1 || providers[0].type !== "file" ||
      !providers[0].options?.path) {
    fail("provisioning/dashboards.yaml: needs apiVersion 1 and one file provider with options.path");
  }
  return problems;
}

// Run as a program (not imported): compared through realpath, so a symlinked checkout works.
if (realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const src = process.argv[2];
  const dashboard = JSON.parse(readFileSync(join(src, "deploy/grafana/outboxd.json"), "utf8"));
  const readme = readFileSync(join(src, "docs/operations.md"), "utf8");
  const [provisioning] = readYamlDocuments(join(src, "deploy/grafana/provisioning/dashboards.yaml"));
  const problems = dashboardProblems(dashboard, readme, provisioning);
  // A broken copy must fail: a misspelt metric, a panel on another data source.
  const broken = structuredClone(dashboard);
  const panel = broken.panels.find((p) => p.type !== "row");
  panel.targets[0].expr = panel.targets[0].expr.replace(/outboxd_[a-z_]+/, "outboxd_events_publish_total");
  panel.datasource = { type: "prometheus", uid: "other" };
  const caught = dashboardProblems(broken, readme, provisioning);
  if (!caught.some((p) => p.includes("outboxd_events_publish_total")) ||
      !caught.some((p) => p.includes("does not use"))) {
    problems.push(`a broken copy (misspelt metric, other data source) passed: ${caught.join("; ")}`);
  }
  for (const p of problems) console.error(`FAIL: deploy/grafana: ${p}`);
  if (problems.length > 0) process.exit(1);
  console.log(`check_dashboard: ok (${[...panelQueries(dashboard)].length} queries; broken copy caught: ${caught.join("; ")})`);
}
