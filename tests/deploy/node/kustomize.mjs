// A small kustomize: renders a kustomization directory the way `kubectl kustomize`
// does, for the subset deploy/kubernetes/ uses, so the tests can validate what a
// cluster would receive without kubectl. Anything outside that subset is an error,
// never silently ignored: a kustomization field this renderer does not know fails.
//
//   import { build } from "./kustomize.mjs";
//   const objects = build("deploy/kubernetes/overlays/orders");  // [{apiVersion, kind, ...}]
//
// Supported: resources (files and kustomization directories), namespace, labels
// (pairs, includeTemplates; includeSelectors must stay false: kustomize then also
// rewrites NetworkPolicy peer selectors, which these manifests do not want),
// images, configMapGenerator (files, literals; the name gets a content-hash suffix
// and references to it follow), patches (strategic-merge files naming their target
// by kind and metadata.name).
import { createHash } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { parseAllDocuments } from "yaml";

const KNOWN_FIELDS = new Set([
  "apiVersion", "kind", "namespace", "resources", "labels", "images", "configMapGenerator",
  "patches",
]);
const CLUSTER_SCOPED = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding",
                                "CustomResourceDefinition"]);

// Parses every YAML document of a file; a syntax error names the file.
export function readYamlDocuments(path) {
  const docs = parseAllDocuments(readFileSync(path, "utf8"));
  const out = [];
  for (const doc of docs) {
    if (doc.errors.length > 0) throw new Error(`${path}: ${doc.errors[0].message}`);
    const value = doc.toJS();
    if (value !== null && value !== undefined) out.push(value);
  }
  return out;
}

function kustomizationOf(dir) {
  for (const name of ["kustomization.yaml", "kustomization.yml", "Kustomization"]) {
    const path = join(dir, name);
    if (existsSync(path)) {
      const [k] = readYamlDocuments(path);
      for (const field of Object.keys(k)) {
        if (!KNOWN_FIELDS.has(field)) {
          throw new Error(`${path}: field ${field} is not supported by tests/deploy/node/kustomize.mjs`);
        }
      }
      if (k.kind !== "Kustomization") throw new Error(`${path}: kind must be Kustomization`);
      return { path, k };
    }
  }
  throw new Error(`${dir}: no kustomization.yaml`);
}

// The merge keys of the strategic-merge patch lists these manifests use; any other
// list is replaced whole, as Kubernetes does for lists without a patch strategy.
const MERGE_KEYS = { containers: "name", initContainers: "name", volumes: "name", env: "name",
                     volumeMounts: "mountPath", ports: "containerPort" };

function strategicMerge(base, patch, field = "") {
  if (Array.isArray(patch)) {
    const key = MERGE_KEYS[field];
    if (!key || !Array.isArray(base)) return structuredClone(patch);
    const out = base.map((x) => structuredClone(x));
    for (const item of patch) {
      const at = out.findIndex((x) => x[key] !== undefined && x[key] === item[key]);
      if (at >= 0) out[at] = strategicMerge(out[at], item);
      else out.push(structuredClone(item));
    }
    return out;
  }
  if (patch === null) return undefined;
  if (typeof patch !== "object" || typeof base !== "object" || base === null || Array.isArray(base)) {
    return structuredClone(patch);
  }
  const out = structuredClone(base);
  for (const [k, v] of Object.entries(patch)) {
    const merged = strategicMerge(base[k], v, k);
    if (merged === undefined) delete out[k];
    else out[k] = merged;
  }
  return out;
}

function configMapHash(cm) {
  // kustomize hashes the ConfigMap's kind, name and data; the exact suffix only has to
  // change when the content does (it is what rolls the Deployment).
  const digest = createHash("sha256")
      .update(JSON.stringify({ kind: "ConfigMap", name: cm.metadata.name, data: cm.data }))
      .digest("hex");
  return digest.slice(0, 10);
}

function generateConfigMap(dir, spec) {
  const data = {};
  for (const entry of spec.files ?? []) {
    const [key, path] = entry.includes("=") ? entry.split("=", 2) : [basename(entry), entry];
    data[key] = readFileSync(join(dir, path), "utf8");
  }
  for (const literal of spec.literals ?? []) {
    const at = literal.indexOf("=");
    if (at < 0) throw new Error(`configMapGenerator ${spec.name}: literal without '=': ${literal}`);
    data[literal.slice(0, at)] = literal.slice(at + 1);
  }
  for (const field of Object.keys(spec)) {
    if (!["name", "files", "literals"].includes(field)) {
      throw new Error(`configMapGenerator ${spec.name}: field ${field} is not supported`);
    }
  }
  const cm = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: spec.name }, data };
  cm.metadata.name = `${spec.name}-${configMapHash(cm)}`;
  return { cm, from: spec.name };
}

function podSpecs(obj) {
  const t = obj.spec?.template?.spec;
  return t ? [t] : [];
}

function renameConfigMapReferences(objects, from, to) {
  for (const obj of objects) {
    for (const pod of podSpecs(obj)) {
      for (const v of pod.volumes ?? []) if (v.configMap?.name === from) v.configMap.name = to;
      for (const c of [...(pod.containers ?? []), ...(pod.initContainers ?? [])]) {
        for (const e of c.envFrom ?? []) if (e.configMapRef?.name === from) e.configMapRef.name = to;
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.configMapKeyRef;
          if (ref?.name === from) ref.name = to;
        }
      }
    }
  }
}

function applyImages(objects, images) {
  for (const img of images) {
    checkEntryFields("images", img.name, img, ["name", "newName", "newTag"]);
    for (const obj of objects) {
      for (const pod of podSpecs(obj)) {
        for (const c of [...(pod.containers ?? []), ...(pod.initContainers ?? [])]) {
          const name = c.image.replace(/[:@].*$/, "");
          if (name !== img.name) continue;
          const tag = img.newTag ?? (c.image.includes(":") ? c.image.split(":").pop() : undefined);
          c.image = `${img.newName ?? name}${tag ? `:${tag}` : ""}`;
        }
      }
    }
  }
}

// Fields of a kustomization's list entries this renderer understands; a misspelt one
// (includeTemplate) would otherwise be ignored here and by kustomize alike.
function checkEntryFields(path, what, entry, known) {
  for (const field of Object.keys(entry)) {
    if (!known.includes(field)) throw new Error(`${path}: ${what}: unknown field ${field}`);
  }
}

function applyLabels(objects, labels, path) {
  for (const set of labels) {
    checkEntryFields(path, "labels", set, ["pairs", "includeSelectors", "includeTemplates"]);
    if (set.includeSelectors) {
      throw new Error(`${path}: labels.includeSelectors is not supported (it rewrites NetworkPolicy peers)`);
    }
    for (const obj of objects) {
      obj.metadata.labels = { ...(obj.metadata.labels ?? {}), ...set.pairs };
      if (set.includeTemplates && obj.spec?.template) {
        const meta = (obj.spec.template.metadata ??= {});
        meta.labels = { ...(meta.labels ?? {}), ...set.pairs };
      }
    }
  }
}

// Renders the kustomization in `dir` to its list of objects.
export function build(dir) {
  const { path, k } = kustomizationOf(dir);
  let objects = [];
  for (const entry of k.resources ?? []) {
    const target = join(dir, entry);
    if (statSync(target).isDirectory()) objects.push(...build(target));
    else objects.push(...readYamlDocuments(target));
  }
  const renames = [];
  for (const spec of k.configMapGenerator ?? []) {
    const { cm, from } = generateConfigMap(dir, spec);
    objects.push(cm);
    renames.push([from, cm.metadata.name]);
  }
  for (const p of k.patches ?? []) {
    if (!p.path || Object.keys(p).length !== 1) {
      throw new Error(`${path}: only patches with a single 'path' are supported`);
    }
    for (const patch of readYamlDocuments(join(dir, p.path))) {
      const at = objects.findIndex((o) => o.kind === patch.kind &&
                                          o.metadata?.name === patch.metadata?.name);
      if (at < 0) {
        throw new Error(`${path}: patch ${p.path} targets ${patch.kind}/${patch.metadata?.name}, which is not in the build`);
      }
      objects[at] = strategicMerge(objects[at], patch);
    }
  }
  for (const [from, to] of renames) renameConfigMapReferences(objects, from, to);
  if (k.namespace) {
    for (const obj of objects) {
      if (!CLUSTER_SCOPED.has(obj.kind)) obj.metadata.namespace = k.namespace;
    }
  }
  applyLabels(objects, k.labels ?? [], path);
  applyImages(objects, k.images ?? []);
  return objects;
}
