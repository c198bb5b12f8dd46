// Checks deploy/kubernetes/ offline, as a cluster would receive it:
//
//  1. every overlay and monitoring/ renders (kustomize.mjs) and each object passes its
//     schema: kubernetes-models for Kubernetes kinds, @kubernetes-models/prometheus-operator
//     for ServiceMonitor and PrometheusRule; a wrong type or a missing required field
//     fails, and so does a field the schema does not have (the packages' validators
//     accept unknown fields, so every property they never look at is reported);
//  2. the pieces fit: selectors match the pod labels, probes and Service name a
//     container port, mounts have volumes, the config file and the password files lie
//     where OUTBOXD_CONFIG and the *-file options point, every outboxd.toml key and
//     OUTBOXD_* variable is an option of `outboxd run` (the built binary's --help),
//     the ServiceMonitor finds each overlay's Service and gives it job="outboxd";
//  3. the PrometheusRule holds exactly the rules of deploy/prometheus/outboxd-alerts.yml;
//  4. deliberately broken copies of the tree (a misspelt field, a wrong type, an unknown
//     outboxd option, ...) each fail, so the checks above cannot pass vacuously.
//
//   node check_kubernetes.mjs SOURCE_DIR BIN_DIR
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { isDeepStrictEqual } from "node:util";

import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Namespace } from "kubernetes-models/v1/Namespace";
import { Service } from "kubernetes-models/v1/Service";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicy";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1/PodDisruptionBudget";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

import { build, readYamlDocuments } from "./kustomize.mjs";

const MODELS = [Deployment, ConfigMap, Namespace, Service, NetworkPolicy, PodDisruptionBudget,
                PrometheusRule, ServiceMonitor];

// ---- 1. schemas -------------------------------------------------------------------

// Wraps `value` so that every property the validator reads, and every object whose
// keys it enumerates (maps such as labels), is recorded.
function tracked(value, path, records) {
  if (value === null || typeof value !== "object") return value;
  const record = { value, path, read: new Set(), enumerated: false };
  records.push(record);
  const children = new Map();
  return new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key === "string") record.read.add(key);
      const v = Reflect.get(target, key, receiver);
      if (typeof key !== "string" || v === null || typeof v !== "object") return v;
      if (!children.has(key)) children.set(key, tracked(v, `${path}/${key}`, records));
      return children.get(key);
    },
    has(target, key) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.has(target, key);
    },
    ownKeys(target) {
      record.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

// Schema problems of one object: the validator's errors, else its unknown fields.
function schemaProblems(obj) {
  const model = MODELS.find((m) => m.apiVersion === obj.apiVersion && m.kind === obj.kind);
  if (!model) return [`${obj.apiVersion} ${obj.kind}: no schema for this kind in the checks`];
  const records = [];
  try {
    model.prototype.validate.call(tracked(obj, "", records));
  } catch (e) {
    return [e.message];
  }
  const unknown = [];
  for (const r of records) {
    if (Array.isArray(r.value) || r.enumerated) continue;
    for (const key of Object.keys(r.value)) {
      if (!r.read.has(key)) unknown.push(`unknown field ${r.path}/${key}`);
    }
  }
  return unknown;
}

// ---- 2. the pieces fit --------------------------------------------------------------

const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v) &&
  Object.keys(selector ?? {}).length > 0;

// `outboxd run --help`: its options and the OUTBOXD_* variables they read.
function runOptions(bin) {
  const help = execFileSync(join(bin, "outboxd"), ["run", "--help"], { encoding: "utf8" });
  const flags = new Set(help.match(/--[a-z0-9][a-z0-9-]*/g));
  const vars = new Set([...help.matchAll(/\(Env:(OUTBOXD_[A-Z0-9_]+)\)/g)].map((m) => m[1]));
  const subcommands = execFileSync(join(bin, "outboxd"), ["--help"], { encoding: "utf8" });
  return { flags, vars, subcommands };
}

// Top-level keys and array/string values of a flat TOML file (outboxd.toml).
function tomlEntries(text) {
  const out = new Map();
  for (const raw of text.split("\n")) {
    const line = raw.replace(/^\s+|\s+$/g, "");
    if (line === "" || line.startsWith("#")) continue;
    const m = line.match(/^([A-Za-z0-9_-]+)\s*=\s*(.*)$/);
    if (!m) throw new Error(`outboxd.toml: cannot read line: ${line}`);
    out.set(m[1], [...m[2].matchAll(/"([^"]*)"/g)].map((x) => x[1]));
  }
  return out;
}

// The mode of the mounted Secret's files, as outboxd judges a secret file
// (src/cli/secrets.cc): the kubelet writes them owned by root, so the group may read
// (0440, how a pod running as non-root reads them under fsGroup) but nothing more, and
// others nothing. An absent defaultMode is Kubernetes' 0644: every start would warn.
function checkSecretMode(mode, podSecurity, fail) {
  const octal = (m) => `0${(m ?? 0o644).toString(8)}`;
  if (mode === undefined || !(mode <= 0o777) || (mode & 0o037) !== 0) {
    fail(`secret defaultMode ${octal(mode)} opens the secret files to others or lets the group write; use 288 (0440)`);
  }
  if (podSecurity?.runAsUser !== 0 && podSecurity?.fsGroup === undefined) {
    fail("the pod runs as non-root without fsGroup: it cannot read the root-owned secret files");
  }
}

function checkPair(name, objects, options, problems) {
  const fail = (msg) => problems.push(`${name}: ${msg}`);
  const of = (kind) => objects.filter((o) => o.kind === kind);
  const [deploy] = of("Deployment");
  const ns = of("Namespace")[0]?.metadata.name;
  if (of("Deployment").length !== 1) return fail("needs exactly one Deployment");
  if (!ns) fail("has no Namespace of its own");
  for (const o of objects) {
    if (o.kind !== "Namespace" && o.metadata.namespace !== ns) {
      fail(`${o.kind}/${o.metadata.name} is in namespace ${o.metadata.namespace}, not ${ns}`);
    }
  }
  const spec = deploy.spec;
  const pod = spec.template.spec;
  const labels = spec.template.metadata?.labels;
  if (spec.replicas !== 2) fail("the Deployment must run 2 replicas (active + standby)");
  if (spec.strategy?.rollingUpdate?.maxSurge !== 0) fail("maxSurge must be 0 (never three relays)");
  if (!matches(spec.selector?.matchLabels, labels)) fail("the Deployment's selector misses its pods");
  if (!labels?.["outboxd.io/database"]) fail("pods carry no outboxd.io/database label");
  for (const kind of ["PodDisruptionBudget", "Service", "NetworkPolicy"]) {
    const [o] = of(kind);
    if (!o) { fail(`no ${kind}`); continue; }
    const sel = kind === "Service" ? o.spec.selector
        : kind === "NetworkPolicy" ? o.spec.podSelector?.matchLabels : o.spec.selector?.matchLabels;
    if (!matches(sel, labels)) fail(`the ${kind}'s selector misses the relay's pods`);
  }
  const [c] = pod.containers;
  const ports = new Set((c.ports ?? []).map((p) => p.name));
  if (c.args?.[0] !== "run" || !new RegExp(`^\\s+run\\s`, "m").test(options.subcommands)) {
    fail("the container must run `outboxd run`");
  }
  for (const [probe, path] of [["readinessProbe", "/readyz"], ["livenessProbe", "/readyz"]]) {
    const get = c[probe]?.httpGet;
    if (get?.path !== path) fail(`${probe} must GET ${path} (a standby answers 503 on /healthz)`);
    if (!ports.has(get?.port)) fail(`${probe} names port ${get?.port}, not a container port`);
  }
  for (const p of of("Service")[0]?.spec.ports ?? []) {
    if (!ports.has(p.targetPort)) fail(`Service targetPort ${p.targetPort} is no container port`);
  }
  const res = c.resources ?? {};
  if (!res.requests?.memory || !res.requests?.cpu || !res.limits?.memory) {
    fail("the container needs cpu and memory requests and a memory limit");
  }
  // Mounts, the config file and the password files.
  const volumes = new Map((pod.volumes ?? []).map((v) => [v.name, v]));
  const mountAt = new Map();
  for (const m of c.volumeMounts ?? []) {
    const v = volumes.get(m.name);
    if (!v) { fail(`volumeMount ${m.name} has no volume`); continue; }
    mountAt.set(m.mountPath, v);
    if (v.secret) checkSecretMode(v.secret.defaultMode, pod.securityContext, fail);
  }
  const env = new Map((c.env ?? []).map((e) => [e.name, e.value]));
  for (const e of env.keys()) {
    if (e.startsWith("OUTBOXD_") && !options.vars.has(e)) fail(`outboxd run reads no variable ${e}`);
  }
  const fileIn = (path, want) => {
    const v = mountAt.get(dirname(path));
    if (!v || !v[want]) fail(`${path} is not on a mounted ${want}`);
    return v?.[want];
  };
  const pw = env.get("OUTBOXD_PG_PASSWORD_FILE");
  if (!pw) fail("no OUTBOXD_PG_PASSWORD_FILE: the password must come from the Secret");
  else fileIn(pw, "secret");
  const configPath = env.get("OUTBOXD_CONFIG");
  const cmRef = configPath && fileIn(configPath, "configMap");
  const cm = cmRef && of("ConfigMap").find((m) => m.metadata.name === cmRef.name);
  const toml = cm?.data?.[configPath.split("/").pop()];
  if (!toml) return fail(`OUTBOXD_CONFIG ${configPath}: no such key in a ConfigMap of the build`);
  const entries = tomlEntries(toml);
  for (const [key, values] of entries) {
    if (!options.flags.has(`--${key}`)) fail(`outboxd.toml: ${key} is not an option of outboxd run`);
    if (key === "kafka-secret-file") for (const v of values) fileIn(v.split("=")[1] ?? "", "secret");
    if (key === "password" || /password=/.test(values.join(" ")) && key !== "kafka-secret-file") {
      fail(`outboxd.toml: ${key} holds a password; use the Secret's files`);
    }
  }
  for (const key of ["pg", "brokers"]) if (!entries.has(key)) fail(`outboxd.toml sets no ${key}`);
}

function checkMonitoring(objects, pairs, alertsFile, problems) {
  const fail = (msg) => problems.push(`monitoring: ${msg}`);
  const sm = objects.find((o) => o.kind === "ServiceMonitor");
  const rule = objects.find((o) => o.kind === "PrometheusRule");
  if (!sm || !rule) return fail("needs a ServiceMonitor and a PrometheusRule");
  if (!sm.spec.namespaceSelector?.any) fail("the ServiceMonitor must look in every namespace");
  for (const [name, objs] of pairs) {
    const svc = objs.find((o) => o.kind === "Service");
    if (!matches(sm.spec.selector?.matchLabels, svc?.metadata.labels)) {
      fail(`the ServiceMonitor does not select ${name}'s Service`);
      continue;
    }
    if (svc.metadata.labels[sm.spec.jobLabel] !== "outboxd") {
      fail(`${name}: jobLabel ${sm.spec.jobLabel} does not give job="outboxd" (the alert rules' job)`);
    }
    for (const ep of sm.spec.endpoints) {
      if (!svc.spec.ports.some((p) => p.name === ep.port)) fail(`endpoint port ${ep.port} is not on ${name}'s Service`);
      const db = (ep.relabelings ?? []).find((r) => r.targetLabel === "database");
      const source = `__meta_kubernetes_service_label_${"outboxd.io/database".replace(/[^a-zA-Z0-9_]/g, "_")}`;
      if (!db?.sourceLabels?.includes(source)) fail("no relabeling gives targets the database label");
    }
  }
  const [alerts] = readYamlDocuments(alertsFile);
  if (!isDeepStrictEqual(rule.spec, alerts)) {
    fail("the PrometheusRule's groups differ from deploy/prometheus/outboxd-alerts.yml (run scripts/gen-prometheusrule)");
  }
}

// Every problem of the tree under `root` (a deploy/kubernetes directory).
function checkTree(root, alertsFile, options) {
  const problems = [];
  const pairs = new Map();
  const builds = [];
  const overlays = readdirSync(join(root, "overlays"));
  if (overlays.length < 2) problems.push("overlays: expected an example overlay per database (two or more)");
  for (const name of overlays) builds.push([`overlays/${name}`, join(root, "overlays", name)]);
  builds.push(["monitoring", join(root, "monitoring")]);
  for (const [name, dir] of builds) {
    let objects;
    try {
      objects = build(dir);
    } catch (e) {
      problems.push(`${name}: ${e.message}`);
      continue;
    }
    for (const obj of objects) {
      for (const p of schemaProblems(obj)) problems.push(`${name}: ${obj.kind}/${obj.metadata?.name}: ${p}`);
    }
    if (name === "monitoring") checkMonitoring(objects, pairs, alertsFile, problems);
    else {
      pairs.set(name, objects);
      checkPair(name, objects, options, problems);
    }
  }
  return problems;
}

// ---- 4. broken copies must fail -------------------------------------------------------

const BROKEN = [
  { what: "a misspelt Deployment field", file: "base/deployment.yaml",
    from: "  replicas: 2", to: "  replica: 2", expect: /unknown field \/spec\/replica\b/ },
  { what: "a string where the schema wants an integer", file: "base/deployment.yaml",
    from: "containerPort: 9187", to: 'containerPort: "9187"', expect: /containerPort must be integer/ },
  { what: "a misspelt probe field", file: "base/deployment.yaml",
    from: "periodSeconds: 5", to: "periodSecond: 5", expect: /unknown field .*readinessProbe\/periodSecond/ },
  { what: "a misspelt ServiceMonitor endpoint field", file: "monitoring/servicemonitor.yaml",
    from: "interval: 15s", to: "intervall: 15s", expect: /unknown field \/spec\/endpoints\/0\/intervall/ },
  { what: "a wrong type in the PrometheusRule", file: "monitoring/prometheusrule.yaml",
    from: "for: 2m", to: "for: [2m]", expect: /PrometheusRule\/outboxd: .*must be string/ },
  { what: "a misspelt kustomization field", file: "overlays/orders/kustomization.yaml",
    from: "includeTemplates: true", to: "includeTemplate: true",
    expect: /labels: unknown field includeTemplate/ },
  { what: "an option outboxd run does not have", file: "overlays/orders/outboxd.toml",
    from: "\nbrokers =", to: "\nbroker =", expect: /broker is not an option of outboxd run/ },
  { what: "a PodDisruptionBudget selecting nothing", file: "base/pdb.yaml",
    from: "matchLabels:\n      app.kubernetes.io/name: outboxd\n      app.kubernetes.io/component: relay\n",
    to: "matchLabels:\n      app.kubernetes.io/name: outboxd\n      app.kubernetes.io/component: relays\n",
    expect: /PodDisruptionBudget's selector misses/ },
  { what: "a PrometheusRule drifted from deploy/prometheus", file: "monitoring/prometheusrule.yaml",
    from: "> 300", to: "> 600", expect: /groups differ from deploy\/prometheus\/outboxd-alerts.yml/ },
  { what: "secret files others may read (outboxd warns at every start)", file: "base/deployment.yaml",
    from: "defaultMode: 288", to: "defaultMode: 292", expect: /secret defaultMode 0444 opens the secret files to others/ },
  { what: "the secret's default mode (0644)", file: "base/deployment.yaml",
    from: "defaultMode: 288", to: "items: []", expect: /secret defaultMode 0644 opens/ },
  { what: "a password file outside the mounted Secret", file: "base/deployment.yaml",
    from: "value: /run/secrets/outboxd/pg-password", to: "value: /etc/outboxd/pg-password",
    expect: /pg-password is not on a mounted secret/ },
];

function checkBrokenCopies(root, alertsFile, options) {
  const problems = [];
  for (const b of BROKEN) {
    const tmp = mkdtempSync(join(tmpdir(), "outboxd-k8s-broken-"));
    try {
      cpSync(root, tmp, { recursive: true });
      const path = join(tmp, b.file);
      const text = readFileSync(path, "utf8");
      if (!text.includes(b.from)) {
        problems.push(`broken copy "${b.what}": ${b.file} no longer contains ${JSON.stringify(b.from)}; update BROKEN`);
        continue;
      }
      writeFileSync(path, text.replace(b.from, b.to));
      const found = checkTree(tmp, alertsFile, options);
      if (!found.some((p) => b.expect.test(p))) {
        problems.push(`broken copy "${b.what}" (${b.file}) was not caught; problems found: ${found.join("; ") || "none"}`);
      } else {
        console.log(`check_kubernetes: broken copy caught: ${b.what}: ${found.find((p) => b.expect.test(p))}`);
      }
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
  return problems;
}

function main() {
  const [src, bin] = process.argv.slice(2);
  if (!src || !bin) {
    console.error("usage: node check_kubernetes.mjs SOURCE_DIR BIN_DIR");
    process.exit(2);
  }
  const root = join(src, "deploy/kubernetes");
  const alertsFile = join(src, "deploy/prometheus/outboxd-alerts.yml");
  const options = runOptions(bin);
  const problems = checkTree(root, alertsFile, options);
  if (problems.length === 0) {
    console.log("check_kubernetes: overlays and monitoring render, pass their schemas and fit together");
    problems.push(...checkBrokenCopies(root, alertsFile, options));
  }
  for (const p of problems) console.error(`FAIL: ${p}`);
  if (problems.length > 0) process.exit(1);
  console.log("check_kubernetes: ok");
}

main();
