// The PromQL of every panel of a Grafana dashboard, one JSON object per line:
// {"panel": title, "expr": query with the dashboard's variables filled in, "metrics":
// [metric names it reads]}. tests/deploy/check_alerts_fire.sh runs each query on a
// real Prometheus and checks the names against a running relay's /metrics.
//
//   node dashboard_queries.mjs deploy/grafana/outboxd.json
import { readFileSync, realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";

// What Grafana substitutes before sending a query: every value of a multi-value
// variable with "All" is its allValue; $__rate_interval is at least 4 scrape intervals.
const VARIABLES = { $__rate_interval: "1m", $__interval: "15s", $__range: "1h" };

const KEYWORDS = new Set(["and", "or", "unless", "by", "without", "on", "ignoring",
                          "group_left", "group_right", "bool", "offset", "inf", "nan"]);

export function metricNames(expr) {
  const stripped = expr
      .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')     // strings
      .replace(/\{[^}]*\}/g, " ")                                        // label matchers
      .replace(/\[[^\]]*\]/g, " ")                                       // ranges, subqueries
      .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ")  // label lists
      .replace(/\boffset\s+-?[0-9a-z]+/g, " ");
  const names = new Set();
  for (const m of stripped.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const after = stripped.slice(m.index + m[0].length);
    if (/^\s*\(/.test(after) || KEYWORDS.has(m[0].toLowerCase())) continue;  // function or keyword
    if (/[0-9.]$/.test(stripped.slice(0, m.index))) continue;            // unit of a number (5e3)
    names.add(m[0]);
  }
  return [...names];
}

export function* panelQueries(dashboard) {
  const variables = { ...VARIABLES };
  for (const v of dashboard.templating?.list ?? []) {
    if (v.type === "query") variables[`$${v.name}`] = v.allValue ?? ".*";
  }
  const fill = (expr) => Object.entries(variables)
      .sort(([a], [b]) => b.length - a.length)
      .reduce((e, [name, value]) => e.split(name).join(value), expr);
  const walk = function* (panels) {
    for (const p of panels ?? []) {
      if (p.type === "row") { yield* walk(p.panels); continue; }
      for (const t of p.targets ?? []) {
        if (t.expr) yield { panel: p.title, expr: fill(t.expr), metrics: metricNames(t.expr) };
      }
    }
  };
  yield* walk(dashboard.panels);
  // label_values(SERIES, label) of the query variables reads SERIES.
  for (const v of dashboard.templating?.list ?? []) {
    const m = v.type === "query" && /^label_values\((.*),\s*[A-Za-z_]+\)$/.exec(v.definition ?? "");
    if (m) yield { panel: `variable ${v.name}`, expr: fill(m[1]), metrics: metricNames(m[1]) };
  }
}

// Run as a program (not imported): compared through realpath, so a symlinked checkout works.
if (realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const dashboard = JSON.parse(readFileSync(process.argv[2], "utf8"));
  for (const q of panelQueries(dashboard)) console.log(JSON.stringify(q));
}
