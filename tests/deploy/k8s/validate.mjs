// Offline validation of Kubernetes manifests (no cluster, no network):
//   1. schema: every object against the Kubernetes OpenAPI schema of its apiVersion/kind, compiled to
//      ajv validators by the kubernetes-models package (types, required fields, enums, formats), and
//      the Prometheus Operator CRD schema for ServiceMonitor (@kubernetes-models/prometheus-operator);
//   2. unknown fields: the OpenAPI schemas allow any extra key (as the API server's non-strict mode
//      does), so every object is also type-checked as a TypeScript object literal of the package's
//      generated interface: excess-property checks reject misspelled or misplaced keys;
//   3. references inside the set: Service selectors and target ports, the StatefulSet's serviceName,
//      selector ⊆ pod labels, volume mounts, Secrets, probe ports, ServiceMonitor selector, port and
//      credentials, one namespace; and kustomization.yaml lists exactly the manifests present.
//
//   node validate.mjs DIR              validate DIR/*.yaml (*.example.yaml included, not listed)
//   node validate.mjs --fixtures DIR   every DIR/*.yaml must FAIL with each of its `# expect: TEXT`
//                                      lines found in the errors (the validator can fail)
// Exit status: 0 valid (or every fixture failed as expected), 1 otherwise, 2 usage.
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";
import ts from "typescript";

const here = path.dirname(new URL(import.meta.url).pathname);

// apiVersion → the module folder of its models.
function modelModule(apiVersion, kind) {
  if (apiVersion === "monitoring.coreos.com/v1") {
    return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${kind}`;
  }
  if (!/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) {
    return null;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

async function importModel(spec) {
  try {
    return await import(spec);
  } catch {
    return null;
  }
}

// ---- loading ---------------------------------------------------------------------------------------

// A document: {file, index, line, obj}. Errors go to `errors` as "file:line: message".
function load(files, errors) {
  const docs = [];
  for (const file of files) {
    const text = fs.readFileSync(file, "utf8");
    const lc = new YAML.LineCounter();
    // YAML 1.1, as Kubernetes' parser reads it (0400 is octal, yes/no are booleans).
    const parsed = YAML.parseAllDocuments(text, { version: "1.1", lineCounter: lc, prettyErrors: true });
    parsed.forEach((d, index) => {
      for (const e of d.errors) errors.push(`${rel(file)}: YAML: ${e.message.split("\n")[0]}`);
      if (d.errors.length) return;
      const obj = d.toJS({ maxAliasCount: 0 });
      if (obj === null || obj === undefined) return;  // an empty document
      const line = d.contents && d.contents.range ? lc.linePos(d.contents.range[0]).line : 1;
      docs.push({ file, index, line, obj });
    });
  }
  return docs;
}

const rel = (f) => path.relative(process.cwd(), f) || f;
const where = (d) => `${rel(d.file)}:${d.line}: ${d.obj.kind || "?"}/${(d.obj.metadata || {}).name || "?"}`;

// ---- 1. schema -------------------------------------------------------------------------------------

async function schemaCheck(docs, errors) {
  for (const d of docs) {
    const { apiVersion, kind } = d.obj;
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      errors.push(`${where(d)}: apiVersion and kind are required`);
      continue;
    }
    if (apiVersion.startsWith("kustomize.config.k8s.io/")) continue;  // checked in refsCheck
    const spec = modelModule(apiVersion, kind);
    const mod = spec ? await importModel(spec) : null;
    const Model = mod && mod[kind];
    if (!Model) {
      errors.push(`${where(d)}: unknown apiVersion/kind ${apiVersion} ${kind} (no schema for it)`);
      continue;
    }
    d.module = spec;
    try {
      new Model(d.obj).validate();
    } catch (e) {
      const detail = (e.errors || []).map((x) => `${x.instancePath || "/"} ${x.message}`);
      errors.push(`${where(d)}: schema: ${detail.length ? detail.join("; ") : e.message}`);
    }
  }
}

// ---- 2. unknown fields (TypeScript excess-property checks) -----------------------------------------

// Pretty-prints `v` as a TypeScript literal, recording the JSON path of every line.
function literal(v, pathNow, indent, lines) {
  const pad = "  ".repeat(indent);
  if (Array.isArray(v)) {
    if (!v.length) return "[]";
    const parts = v.map((x, i) => {
      const p = `${pathNow}[${i}]`;
      lines.push(p);
      return `${pad}  ${literal(x, p, indent + 1, lines)}`;
    });
    lines.push(pathNow);
    return `[\n${parts.join(",\n")}\n${pad}]`;
  }
  if (v !== null && typeof v === "object") {
    const keys = Object.keys(v);
    if (!keys.length) return "{}";
    const parts = keys.map((k) => {
      const p = pathNow ? `${pathNow}.${k}` : k;
      lines.push(p);
      return `${pad}  ${JSON.stringify(k)}: ${literal(v[k], p, indent + 1, lines)}`;
    });
    lines.push(pathNow);
    return `{\n${parts.join(",\n")}\n${pad}}`;
  }
  return JSON.stringify(v);
}

function fieldCheck(docs, errors) {
  const checked = docs.filter((d) => d.module);
  if (!checked.length) return;
  // One source file; line i+1 belongs to lineOwner[i] (a document) at linePath[i] (a JSON path).
  const src = [];
  const lineOwner = [];
  const linePath = [];
  checked.forEach((d, n) => {
    src.push(`import type { I${d.obj.kind} as T${n} } from ${JSON.stringify(d.module)};`);
    lineOwner.push(null);
    linePath.push("");
    const lines = [];
    const body = literal(d.obj, "", 0, lines);
    src.push(`export const doc${n}: T${n} = ${body};`);
    // The first line of the literal is the opening brace of the document itself.
    lineOwner.push(d);
    linePath.push("");
    for (const p of lines) {
      lineOwner.push(d);
      linePath.push(p);
    }
  });
  const text = src.join("\n") + "\n";
  const file = path.join(here, ".manifests-check.ts");
  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const readFile = host.readFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  host.readFile = (f) => (path.resolve(f) === file ? text : readFile(f));
  host.fileExists = (f) => path.resolve(f) === file || fileExists(f);
  host.getSourceFile = ((orig) => (f, lang, onError) =>
    path.resolve(f) === file ? ts.createSourceFile(f, text, lang, true) : orig(f, lang, onError))(
    host.getSourceFile.bind(host),
  );
  const program = ts.createProgram([file], options, host);
  for (const diag of ts.getPreEmitDiagnostics(program)) {
    if (!diag.file || path.resolve(diag.file.fileName) !== file) {
      errors.push(`TypeScript: ${ts.flattenDiagnosticMessageText(diag.messageText, " ")}`);
      continue;
    }
    const { line } = diag.file.getLineAndCharacterOfPosition(diag.start);
    const d = lineOwner[line];
    const p = linePath[line];
    let msg = ts.flattenDiagnosticMessageText(diag.messageText, " ");
    const unknown = /known properties, and '"?([^'"]+)"?' does not exist in type '([^']+)'/.exec(msg);
    if (unknown) msg = `unknown field (not in ${unknown[2]})`;
    if (!d) {
      errors.push(`TypeScript: ${msg}`);
    } else {
      errors.push(`${where(d)}: ${p || "(document)"}: ${msg}`);
    }
  }
}

// ---- 3. references ---------------------------------------------------------------------------------

const podSpecOf = (o) => (o.spec && o.spec.template && o.spec.template.spec) || null;
const subset = (sel, labels) => Object.entries(sel || {}).every(([k, v]) => (labels || {})[k] === v);

function refsCheck(docs, files, errors) {
  const objs = docs.map((d) => d.obj);
  const byKind = (k) => docs.filter((d) => d.obj.kind === k);
  const workloads = docs.filter((d) => podSpecOf(d.obj));
  const secrets = new Set(byKind("Secret").map((d) => d.obj.metadata.name));
  const namespaces = new Set(byKind("Namespace").map((d) => d.obj.metadata.name));

  // Namespaced objects: one namespace, declared in the set when a Namespace is.
  const ns = new Set();
  for (const d of docs) {
    if (["Namespace", "Kustomization"].includes(d.obj.kind)) continue;
    const n = (d.obj.metadata || {}).namespace;
    if (!n) errors.push(`${where(d)}: metadata.namespace is not set`);
    else ns.add(n);
    if (n && namespaces.size && !namespaces.has(n)) errors.push(`${where(d)}: namespace ${n} is not declared`);
  }
  if (ns.size > 1) errors.push(`objects span several namespaces: ${[...ns].join(", ")}`);

  for (const d of workloads) {
    const o = d.obj;
    const labels = (o.spec.template.metadata || {}).labels || {};
    const sel = (o.spec.selector || {}).matchLabels;
    if (sel && !subset(sel, labels)) {
      errors.push(`${where(d)}: spec.selector.matchLabels does not match spec.template.metadata.labels`);
    }
    const pod = podSpecOf(o);
    const vols = new Set((pod.volumes || []).map((v) => v.name));
    for (const t of o.spec.volumeClaimTemplates || []) vols.add(t.metadata.name);
    for (const v of pod.volumes || []) {
      if (v.secret && !secrets.has(v.secret.secretName)) {
        errors.push(`${where(d)}: volume ${v.name}: Secret ${v.secret.secretName} is not in the set`);
      }
    }
    for (const c of [...(pod.initContainers || []), ...(pod.containers || [])]) {
      for (const m of c.volumeMounts || []) {
        if (!vols.has(m.name)) errors.push(`${where(d)}: container ${c.name}: volumeMount ${m.name}: no such volume`);
      }
      const ports = new Set((c.ports || []).flatMap((p) => [p.containerPort, p.name]));
      for (const probe of ["readinessProbe", "livenessProbe", "startupProbe"]) {
        const p = c[probe];
        if (!p) continue;
        const port = (p.grpc || p.httpGet || p.tcpSocket || {}).port;
        if (port !== undefined && !ports.has(port)) {
          errors.push(`${where(d)}: container ${c.name}: ${probe} port ${port} is not a container port`);
        }
      }
    }
    if (o.kind === "StatefulSet") {
      const svc = byKind("Service").find((s) => s.obj.metadata.name === o.spec.serviceName);
      if (!svc) errors.push(`${where(d)}: spec.serviceName ${o.spec.serviceName}: no such Service`);
    }
  }

  for (const d of byKind("Service")) {
    const sel = d.obj.spec.selector || {};
    const pods = workloads.filter((w) => subset(sel, (w.obj.spec.template.metadata || {}).labels));
    if (!pods.length) {
      errors.push(`${where(d)}: spec.selector ${JSON.stringify(sel)} selects no pod template in the set`);
      continue;
    }
    for (const p of d.obj.spec.ports || []) {
      const target = p.targetPort === undefined ? p.port : p.targetPort;
      const ok = pods.some((w) =>
        podSpecOf(w.obj).containers.some((c) =>
          (c.ports || []).some((cp) => cp.name === target || cp.containerPort === target),
        ),
      );
      if (!ok) errors.push(`${where(d)}: port ${p.name || p.port}: targetPort ${target} is not a container port`);
    }
  }

  for (const d of byKind("ServiceMonitor")) {
    const sel = (d.obj.spec.selector || {}).matchLabels || {};
    const svcs = byKind("Service").filter((s) => subset(sel, s.obj.metadata.labels));
    if (!svcs.length) errors.push(`${where(d)}: spec.selector selects no Service in the set`);
    for (const ep of d.obj.spec.endpoints || []) {
      if (ep.port && svcs.length && !svcs.some((s) => (s.obj.spec.ports || []).some((p) => p.name === ep.port))) {
        errors.push(`${where(d)}: endpoint port ${ep.port}: no such port on the selected Services`);
      }
      const cred = ((ep.authorization || {}).credentials || ep.bearerTokenSecret || {}).name;
      if (cred && !secrets.has(cred)) errors.push(`${where(d)}: endpoint credentials: Secret ${cred} is not in the set`);
    }
  }

  // kustomization.yaml: known keys, and the resources are exactly the manifests present.
  for (const d of byKind("Kustomization")) {
    const known = ["apiVersion", "kind", "namespace", "resources", "images", "labels", "commonLabels",
      "commonAnnotations", "patches", "secretGenerator", "configMapGenerator", "namePrefix", "nameSuffix"];
    for (const k of Object.keys(d.obj)) {
      if (!known.includes(k)) errors.push(`${where(d)}: ${k}: unknown field`);
    }
    const dir = path.dirname(d.file);
    const listed = new Set(d.obj.resources || []);
    for (const r of listed) {
      if (!fs.existsSync(path.join(dir, r))) errors.push(`${where(d)}: resources: ${r} does not exist`);
    }
    for (const f of files) {
      const b = path.basename(f);
      if (path.dirname(f) !== dir || b === path.basename(d.file) || b.includes(".example.")) continue;
      if (!listed.has(b)) errors.push(`${where(d)}: resources: ${b} is not listed`);
    }
    for (const o of objs) {
      const n = (o.metadata || {}).namespace;
      if (d.obj.namespace && n && n !== d.obj.namespace) {
        errors.push(`${where(d)}: namespace ${d.obj.namespace} differs from ${o.kind}/${o.metadata.name}'s ${n}`);
      }
    }
  }
}

// ---- main ------------------------------------------------------------------------------------------

async function validate(files) {
  const errors = [];
  const docs = load(files, errors);
  await schemaCheck(docs, errors);
  fieldCheck(docs, errors);
  refsCheck(docs, files, errors);
  return { docs, errors };
}

const yamlFiles = (dir) =>
  fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort().map((f) => path.join(dir, f));

async function main(argv) {
  if (argv.length === 1 && !argv[0].startsWith("-")) {
    const files = yamlFiles(argv[0]);
    if (!files.length) {
      console.error(`validate: no *.yaml in ${argv[0]}`);
      return 1;
    }
    const { docs, errors } = await validate(files);
    for (const e of errors) console.error(e);
    const kinds = docs.map((d) => d.obj.kind).join(", ");
    console.log(`${docs.length} objects in ${files.length} files (${kinds}): ` +
      (errors.length ? `${errors.length} error(s)` : "valid"));
    return errors.length ? 1 : 0;
  }
  if (argv.length === 2 && argv[0] === "--fixtures") {
    let bad = 0;
    for (const f of yamlFiles(argv[1])) {
      const expects = fs.readFileSync(f, "utf8").split("\n")
        .map((l) => /^# expect: (.+)$/.exec(l)).filter(Boolean).map((m) => m[1].trim());
      const { errors } = await validate([f]);
      const missing = expects.filter((x) => !errors.some((e) => e.includes(x)));
      if (!expects.length || missing.length || !errors.length) {
        ++bad;
        console.error(`${rel(f)}: expected errors containing ${JSON.stringify(missing.length ? missing : expects)}; got:`);
        for (const e of errors) console.error(`  ${e}`);
      } else {
        console.log(`${rel(f)}: rejected as expected (${errors.length} error(s); first: ${errors[0]})`);
      }
    }
    return bad ? 1 : 0;
  }
  console.error("usage: node validate.mjs DIR | --fixtures DIR");
  return 2;
}

process.exitCode = await main(process.argv.slice(2));
