#!/usr/bin/env python3
"""Checks the dedupd Helm chart (helm/dedupd) without a helm binary or a cluster.

    python3 scripts/helm_check.py [-v] [--chart DIR]

The chart is rendered by Helm itself: helm-python-sdk (PyPI) wraps Helm's Go SDK in a
shared library, so templates, sprig functions, .Files.Get, `fail` and `required` behave as
in `helm template`. The script then lints the chart (`helm lint --strict`) and checks what
it renders, with the default values, with helm/dedupd/ci/full-values.yaml (every optional
part switched on) and with a few invalid values that must be refused:

  * every manifest parses as YAML and has the expected kind and apiVersion;
  * Deployment, ConfigMap, Service, PodDisruptionBudget and ServiceAccount match the
    Kubernetes API schema (field names, types, required fields), read from the models of the
    official Kubernetes Python client (its wheel is read as data, never imported);
  * the ConfigMap's dedupd.toml parses (tomllib), has every section of config/dedupd.toml,
    only keys config/dedupd.toml knows (except the [kafka] pass-through) with the same types,
    equals config/dedupd.toml with the default values (but for the in-container admin
    address), and carries the values set (window = "5m", the TLS file paths, the admin
    token file, ...), never a secret;
  * the Deployment: replicas (replicaCount), probes on /healthz and /readyz at the admin port,
    terminationGracePeriodSeconds > shutdown timeout, DEDUPD__ADMIN__LISTEN, non-root and a
    read-only root filesystem, secrets as DEDUPD__KAFKA__* env vars, the TLS and admin
    token mounts, the config checksum annotation;
  * Service, ServiceMonitor, PodDisruptionBudget and PrometheusRule select the pods and
    name the right port; the PrometheusRule carries files/alerts.yml, which must equal
    grafana/alerts.yml once that exists;
  * the Dockerfile agrees with the chart (user 10001, port, config path, entrypoint).

Dependencies go to target/helm-check/ (pinned, nothing is installed into the interpreter):
helm-python-sdk, the kubernetes client wheel, and PyYAML when it is not importable.
Prints `helm_check: N passed, N failed` and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import hashlib
import importlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "dedupd"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
SHIPPED_TOML = ROOT / "config" / "dedupd.toml"
ALERTS_SOURCE = ROOT / "grafana" / "alerts.yml"
CACHE = ROOT / "target" / "helm-check"
SITE = CACHE / "site"

HELM_SDK = "helm-python-sdk==0.2.2"
PYYAML = "PyYAML==6.0.2"
KUBERNETES = "kubernetes==37.0.2"

RELEASE, NAMESPACE = "rel", "streaming"
EXPECTED_KINDS = {
    "Deployment": "apps/v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "PodDisruptionBudget": "policy/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
}
SCHEMA_MODELS = {
    "Deployment": "V1Deployment",
    "ConfigMap": "V1ConfigMap",
    "Service": "V1Service",
    "ServiceAccount": "V1ServiceAccount",
    "PodDisruptionBudget": "V1PodDisruptionBudget",
}

VERBOSE = False


# ---------------------------------------------------------------------------- dependencies


def say(msg: str) -> None:
    print(f"helm_check: {msg}", flush=True)


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"]
    env = dict(os.environ, PIP_ROOT_USER_ACTION="ignore")
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"helm_check: error: `{' '.join(cmd)}` failed:\n{result.stderr.strip()}")


def ensure_site(requirements: list[str]) -> None:
    """Installs `requirements` into target/helm-check/site unless that was done already."""
    stamp = SITE / ".requirements"
    have = set(stamp.read_text().split()) if stamp.exists() else set()
    if not set(requirements) <= have:
        say(f"installing {', '.join(requirements)} into {SITE.relative_to(ROOT)}")
        pip("install", "--no-deps", "--upgrade", "--target", str(SITE), *requirements)
        stamp.write_text("\n".join(sorted(have | set(requirements))) + "\n")
    if str(SITE) not in sys.path:
        sys.path.insert(0, str(SITE))
    importlib.invalidate_caches()


def kubernetes_wheel() -> Path:
    """The kubernetes client wheel (read as a zip for its API models, never imported)."""
    dest = CACHE / "wheels"
    name, version = KUBERNETES.split("==")
    found = sorted(dest.glob(f"{name}-{version}-*.whl"))
    if not found:
        say(f"downloading {KUBERNETES} (for the Kubernetes API schema)")
        dest.mkdir(parents=True, exist_ok=True)
        pip("download", "--no-deps", "--only-binary=:all:", "--dest", str(dest), KUBERNETES)
        found = sorted(dest.glob(f"{name}-{version}-*.whl"))
    if not found:
        sys.exit(f"helm_check: error: no {KUBERNETES} wheel in {dest}")
    return found[-1]


def load_dependencies():
    requirements = [HELM_SDK]
    try:
        importlib.import_module("yaml")
    except ImportError:
        requirements.append(PYYAML)
    CACHE.mkdir(parents=True, exist_ok=True)
    ensure_site(requirements)
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        ensure_site(requirements + ["tomli==2.0.1"])
        import tomli as tomllib
    import yaml
    import helm_python

    return helm_python, yaml, tomllib


# ---------------------------------------------------------------------------- results


class Checks:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []
        self.scope = ""

    def ok(self, cond: bool, what: str, detail: str = "") -> bool:
        label = f"[{self.scope}] {what}" if self.scope else what
        if cond:
            self.passed += 1
            if VERBOSE:
                print(f"  ok    {label}")
        else:
            self.failed.append(label + (f": {detail}" if detail else ""))
            print(f"  FAIL  {label}" + (f"\n        {detail}" if detail else ""), flush=True)
        return cond

    def eq(self, got, want, what: str) -> bool:
        return self.ok(got == want, what, f"got {got!r}, want {want!r}")


# ---------------------------------------------------------------------------- k8s schema


class Schema:
    """Kubernetes API models from the official Python client's generated sources: for each
    model its fields (JSON name -> type) and required fields. A structural check: unknown
    fields, wrong scalar types and missing required fields, which `helm template` does not
    catch."""

    # Fields the client types as str that the API server takes as a Quantity / IntOrString.
    NUMERIC_STRINGS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests"),
                       ("V1EmptyDirVolumeSource", "sizeLimit")}

    def __init__(self, wheel: Path) -> None:
        self.zip = zipfile.ZipFile(wheel)
        self.files: dict[str, str] = {}
        prefix = "kubernetes/client/models/"
        for name in self.zip.namelist():
            if name.startswith(prefix) and name.endswith(".py") and not name.endswith("__init__.py"):
                stem = name[len(prefix):-3]
                self.files[stem.replace("_", "")] = name
        self.models: dict[str, tuple[dict[str, str], set[str]]] = {}

    def model(self, cls: str):
        if cls not in self.models:
            path = self.files.get(cls.lower())
            if path is None:
                raise KeyError(cls)
            source = self.zip.read(path).decode()
            tree = ast.parse(source)
            types: dict[str, str] = {}
            names: dict[str, str] = {}
            required: set[str] = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name == cls:
                    annotated: dict[str, str] = {}
                    for stmt in node.body:
                        # The client's generated models: older ones assign openapi_types and
                        # attribute_map; pydantic ones (v34+) annotate them as ClassVars and
                        # declare each field with its annotation (Optional[...] = not required).
                        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                            target, value = getattr(stmt.targets[0], "id", ""), stmt.value
                        elif isinstance(stmt, ast.AnnAssign):
                            target, value = getattr(stmt.target, "id", ""), stmt.value
                            annotated[target] = ast.unparse(stmt.annotation)
                        else:
                            continue
                        if target == "openapi_types" and value is not None:
                            types = ast.literal_eval(value)
                        elif target == "attribute_map" and value is not None:
                            names = ast.literal_eval(value)
                    required = {a for a in types if a in annotated and not annotated[a].startswith("Optional[")}
            required |= set(re.findall(r"Invalid value for `(\w+)`, must not be `None`", source))
            if not types or not names:
                raise KeyError(f"{cls}: no openapi_types/attribute_map in {path}")
            fields = {names[attr]: types[attr] for attr in types}
            self.models[cls] = (fields, {names[a] for a in required if a in names})
        return self.models[cls]

    def validate(self, obj, typ: str, path: str, errors: list[str], owner: tuple[str, str] = ("", "")):
        if obj is None:
            return
        if typ.startswith(("list[", "List[")):
            if not isinstance(obj, list):
                errors.append(f"{path}: expected a list, got {type(obj).__name__}")
                return
            for i, item in enumerate(obj):
                self.validate(item, typ[5:-1], f"{path}[{i}]", errors, owner)
        elif typ.startswith(("dict(", "Dict[")):
            if not isinstance(obj, dict):
                errors.append(f"{path}: expected a map, got {type(obj).__name__}")
                return
            inner = typ[5:-1].split(", ", 1)[1]
            for k, v in obj.items():
                self.validate(v, inner, f"{path}.{k}", errors, owner)
        elif typ in ("str", "bytes"):
            numeric_ok = owner in self.NUMERIC_STRINGS
            if not (isinstance(obj, str) or (numeric_ok and isinstance(obj, (int, float)) and not isinstance(obj, bool))):
                errors.append(f"{path}: expected a string, got {type(obj).__name__} {obj!r} (quote it)")
        elif typ == "int":
            if not isinstance(obj, int) or isinstance(obj, bool):
                errors.append(f"{path}: expected an integer, got {type(obj).__name__} {obj!r}")
        elif typ == "float":
            if not isinstance(obj, (int, float)) or isinstance(obj, bool):
                errors.append(f"{path}: expected a number, got {obj!r}")
        elif typ == "bool":
            if not isinstance(obj, bool):
                errors.append(f"{path}: expected a boolean, got {type(obj).__name__} {obj!r}")
        elif typ in ("object", "datetime", "date"):
            pass
        else:
            if not isinstance(obj, dict):
                errors.append(f"{path}: expected a {typ} map, got {type(obj).__name__}")
                return
            fields, required = self.model(typ)
            for key, value in obj.items():
                if key not in fields:
                    errors.append(f"{path}.{key}: unknown field of {typ}")
                else:
                    self.validate(value, fields[key], f"{path}.{key}", errors, (typ, key))
            for key in sorted(required - set(obj)):
                if key not in ("apiVersion", "kind"):
                    errors.append(f"{path}.{key}: required field of {typ} is missing")


# ---------------------------------------------------------------------------- rendering


@contextlib.contextmanager
def native_stderr_captured():
    """Helm's Go code writes warnings straight to file descriptor 2 (e.g. for the invalid
    values the refusal checks feed it): keep them out of the log unless -v."""
    if VERBOSE:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def render(helm, yaml, values: dict | None):
    """Rendered manifests by template path (NOTES.txt kept as text), or the render error."""
    with helm.Chart.load(str(CHART)) as chart:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    docs: dict[str, list[dict]] = {}
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt") or not path.endswith((".yaml", ".yml")):
            continue
        docs[path] = [d for d in yaml.safe_load_all(text) if d is not None]
    return out, docs


def by_kind(docs: dict[str, list[dict]]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for items in docs.values():
        for d in items:
            found[d.get("kind", "?")] = d
    return found


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def type_name(v) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


# ---------------------------------------------------------------------------- checks


def check_common(c: Checks, schema: Schema, out: dict, docs: dict, values: dict) -> dict:
    """Checks every scenario shares; returns the objects by kind."""
    kinds = by_kind(docs)
    seen = [d for items in docs.values() for d in items]
    c.ok(len(seen) == len(kinds), "one object per kind", f"{[d.get('kind') for d in seen]}")
    for d in seen:
        kind = d.get("kind")
        c.ok(kind in EXPECTED_KINDS, f"{kind} is an expected kind")
        c.eq(d.get("apiVersion"), EXPECTED_KINDS.get(kind), f"{kind} apiVersion")
        name = (d.get("metadata") or {}).get("name", "")
        c.ok(bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name)), f"{kind} name {name!r} is a DNS label")
        labels = (d.get("metadata") or {}).get("labels") or {}
        c.eq(labels.get("app.kubernetes.io/instance"), RELEASE, f"{kind} instance label")
        if kind in SCHEMA_MODELS:
            errors: list[str] = []
            schema.validate(d, SCHEMA_MODELS[kind], kind, errors)
            c.ok(not errors, f"{kind} matches the Kubernetes API schema", "; ".join(errors))
    for must in ("Deployment", "ConfigMap", "Service"):
        c.ok(must in kinds, f"renders a {must}")
    c.ok(any(p.endswith("NOTES.txt") and out[p].strip() for p in out), "NOTES.txt renders")

    dep = kinds.get("Deployment", {})
    pod = dep.get("spec", {}).get("template", {})
    pod_labels = pod.get("metadata", {}).get("labels", {})
    selector = dep.get("spec", {}).get("selector", {}).get("matchLabels", {})
    c.ok(bool(selector) and selector.items() <= pod_labels.items(), "Deployment selector matches its pod labels")
    spec = pod.get("spec", {})
    containers = spec.get("containers", [])
    c.eq(len(containers), 1, "one container")
    ctr = containers[0] if containers else {}
    port = int(values["service"]["port"])
    ports = {p.get("name"): p.get("containerPort") for p in ctr.get("ports", [])}
    c.eq(ports.get("admin"), port, "container port named admin")
    c.eq(ctr.get("args"), ["run", "--config", "/etc/dedupd/dedupd.toml"], "container args")

    # Probes.
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        get = (ctr.get(probe) or {}).get("httpGet") or {}
        c.eq((get.get("path"), get.get("port")), (path, "admin"), f"{probe} on {path} at the admin port")
    startup = ctr.get("startupProbe") or {}
    budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
    c.ok(budget >= 300, "startupProbe allows at least 5 minutes", f"{budget}s")

    # Shutdown.
    timeout = int(values["shutdownTimeoutSeconds"])
    grace = spec.get("terminationGracePeriodSeconds")
    c.ok(isinstance(grace, int) and grace > timeout, "terminationGracePeriodSeconds > shutdown timeout",
         f"{grace} vs {timeout}")
    c.eq(grace, timeout + int(values["terminationGraceMarginSeconds"]), "terminationGracePeriodSeconds = timeout + margin")

    # Environment.
    env = ctr.get("env", [])
    names = [e.get("name") for e in env]
    c.ok(len(names) == len(set(names)), "env names are unique", f"{names}")
    c.ok(all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n or "") for n in names), "env names are identifiers", f"{names}")
    env_values = {e["name"]: e.get("value") for e in env}
    c.eq(env_values.get("DEDUPD__ADMIN__LISTEN"), f"0.0.0.0:{port}", "DEDUPD__ADMIN__LISTEN")

    # Security.
    psc, csc = spec.get("securityContext") or {}, ctr.get("securityContext") or {}
    c.ok(psc.get("runAsNonRoot") is True and psc.get("runAsUser") == 10001, "pod runs as non-root uid 10001", f"{psc}")
    c.ok(csc.get("readOnlyRootFilesystem") is True, "read-only root filesystem")
    c.ok(csc.get("allowPrivilegeEscalation") is False, "no privilege escalation")

    # Volumes.
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["name"]: m for m in ctr.get("volumeMounts", [])}
    c.ok(set(mounts) <= set(volumes), "every volumeMount has a volume", f"{set(mounts) - set(volumes)}")
    cm = kinds.get("ConfigMap", {})
    c.eq((volumes.get("config") or {}).get("configMap", {}).get("name"), cm.get("metadata", {}).get("name"),
         "config volume is the chart's ConfigMap")
    c.eq((mounts.get("config") or {}).get("mountPath"), "/etc/dedupd", "ConfigMap mounted at /etc/dedupd")
    paths = sorted(m["mountPath"] for m in mounts.values())
    nested = [(a, b) for a in paths for b in paths if a != b and b.startswith(a.rstrip("/") + "/")]
    c.ok(not nested, "no mount inside another (the ConfigMap volume is read-only)", f"{nested}")

    # Config checksum: sha256 of the rendered configmap.yaml, so a config change rolls the pods.
    cm_text = next((t for p, t in out.items() if p.endswith("templates/configmap.yaml")), "")
    c.eq(pod.get("metadata", {}).get("annotations", {}).get("checksum/config"),
         hashlib.sha256(cm_text.encode()).hexdigest(), "checksum/config is the ConfigMap's sha256")

    # Service.
    svc = kinds.get("Service", {})
    svc_ports = {p.get("name"): p for p in svc.get("spec", {}).get("ports", [])}
    c.ok("admin" in svc_ports and svc_ports["admin"].get("port") == port, "Service port admin", f"{svc_ports}")
    c.ok(svc_ports.get("admin", {}).get("targetPort") in ("admin", port), "Service targets the admin port")
    svc_sel = svc.get("spec", {}).get("selector", {})
    c.ok(bool(svc_sel) and svc_sel.items() <= pod_labels.items(), "Service selects the pods")

    # PodDisruptionBudget.
    pdb = kinds.get("PodDisruptionBudget")
    if values["podDisruptionBudget"]["enabled"]:
        c.ok(pdb is not None, "renders a PodDisruptionBudget")
        pdb = pdb or {}
        c.eq(pdb.get("spec", {}).get("maxUnavailable"), 1, "PodDisruptionBudget maxUnavailable")
        pdb_sel = pdb.get("spec", {}).get("selector", {}).get("matchLabels", {})
        c.ok(bool(pdb_sel) and pdb_sel.items() <= pod_labels.items(), "PodDisruptionBudget selects the pods")
    return kinds


def check_toml(c: Checks, tomllib, cm: dict, shipped: dict, values: dict) -> dict:
    text = (cm.get("data") or {}).get("dedupd.toml", "")
    try:
        conf = tomllib.loads(text)
    except Exception as e:  # noqa: BLE001
        c.ok(False, "dedupd.toml parses as TOML", f"{e}\n{text}")
        return {}
    c.ok(True, "dedupd.toml parses as TOML")
    missing = [s for s in shipped if s not in conf]
    c.ok(not missing, "dedupd.toml has every section of config/dedupd.toml", f"missing {missing}")
    extra = [s for s in conf if s not in shipped]
    c.ok(not extra, "dedupd.toml has no section config/dedupd.toml lacks", f"{extra}")
    for section, table in conf.items():
        if section == "kafka" or section not in shipped:
            continue
        for key, value in table.items():
            if key not in shipped[section]:
                c.ok(False, f"{section}.{key} is a setting of config/dedupd.toml")
                continue
            want = shipped[section][key]
            c.ok(type_name(value) == type_name(want), f"{section}.{key} has the type of config/dedupd.toml",
                 f"{value!r} vs {want!r}")
    c.eq(conf.get("admin", {}).get("listen"), f"0.0.0.0:{int(values['service']['port'])}", "admin.listen in the container")
    c.eq(conf.get("shutdown", {}).get("timeout"), f"{int(values['shutdownTimeoutSeconds'])}s", "shutdown.timeout")
    c.eq(conf.get("kafka", {}).get("brokers"), values["kafka"]["brokers"], "kafka.brokers")
    return conf


def check_defaults(c: Checks, schema, helm, yaml, tomllib, shipped: dict, chart_values: dict) -> None:
    c.scope = "defaults"
    out, docs = render(helm, yaml, None)
    kinds = check_common(c, schema, out, docs, chart_values)
    for optional in ("ServiceMonitor", "PrometheusRule", "ServiceAccount"):
        c.ok(optional not in kinds, f"no {optional} by default")
    conf = check_toml(c, tomllib, kinds.get("ConfigMap", {}), shipped, chart_values)
    # With the default values the chart's dedupd.toml is config/dedupd.toml, but for the admin
    # address (0.0.0.0 in a pod) and the brokers (kafka.brokers).
    for section, table in shipped.items():
        for key, want in table.items():
            if (section, key) in (("admin", "listen"), ("kafka", "brokers")):
                continue
            got = conf.get(section, {}).get(key, "<missing>")
            c.ok(got == want, f"default {section}.{key} equals config/dedupd.toml",
                 f"chart {got!r}, config/dedupd.toml {want!r}: update config.{section}.{key} in "
                 "helm/dedupd/values.yaml")
    dep = kinds.get("Deployment", {})
    c.eq(dep.get("spec", {}).get("replicas"), chart_values["replicaCount"], "replicas = replicaCount default")
    env = dep["spec"]["template"]["spec"]["containers"][0].get("env", [])
    c.ok(not any("secretKeyRef" in (e.get("valueFrom") or {}) for e in env), "no secret env without existingSecret")
    c.ok(not conf.get("kafka", {}).keys() - {"brokers"}, "no librdkafka settings by default")
    c.ok(not any(v.get("name") == "admin-token" for v in dep["spec"]["template"]["spec"].get("volumes", [])),
         "no admin token volume by default")


def check_full(c: Checks, schema, helm, yaml, tomllib, shipped: dict, chart_values: dict) -> None:
    c.scope = "full-values"
    over = yaml.safe_load(FULL_VALUES.read_text())
    values = deep_merge(chart_values, over)
    out, docs = render(helm, yaml, over)
    kinds = check_common(c, schema, out, docs, values)
    conf = check_toml(c, tomllib, kinds.get("ConfigMap", {}), shipped, values)

    # Values reach dedupd.toml.
    c.eq(conf.get("filter", {}).get("window"), "5m", "config.filter.window reaches dedupd.toml")
    c.eq(conf.get("filter", {}).get("slices"), 12, "config.filter.slices reaches dedupd.toml")
    c.eq(conf.get("filter", {}).get("expected_keys"), 25000000, "large integers stay integers")
    c.eq(conf.get("filter", {}).get("fpr"), 0.001, "floats stay floats")
    c.eq(conf.get("input", {}).get("topics"), ["clicks", "clicks-mobile"], "lists reach dedupd.toml")
    c.eq(conf.get("app", {}).get("id"), "clicks-dedup", "config.app.id reaches dedupd.toml")
    c.eq(conf.get("filter", {}).get("timer_bits"), 8, "unset keys keep their defaults")
    kafka = conf.get("kafka", {})
    c.eq(kafka.get("security.protocol"), "SASL_SSL", "dotted librdkafka names pass through")
    c.eq(kafka.get("session.timeout.ms"), 10000, "nested maps flatten to dotted librdkafka names")
    tls = values["kafka"]["tls"]
    mount = tls["mountPath"]
    c.eq(kafka.get("ssl.ca.location"), f"{mount}/{tls['caKey']}", "ssl.ca.location points into the TLS mount")
    c.eq(kafka.get("ssl.certificate.location"), f"{mount}/{tls['certKey']}", "ssl.certificate.location")
    c.eq(kafka.get("ssl.key.location"), f"{mount}/{tls['keyKey']}", "ssl.key.location")
    c.ok("sasl.password" not in kafka and "sasl.username" not in kafka, "no credentials in the ConfigMap")
    admin_token = values["admin"]["tokenSecret"]
    admin = conf.get("admin", {})
    c.eq(admin.get("token"), "", "no admin token in the ConfigMap")
    c.eq(admin.get("token_file"), f"{admin_token['mountPath']}/{admin_token['key']}",
         "admin.token_file points into the admin token mount")
    c.eq(admin.get("key_endpoints"), values["admin"]["keyEndpoints"], "admin.keyEndpoints reaches dedupd.toml")

    dep = kinds.get("Deployment", {})
    c.eq(dep.get("spec", {}).get("replicas"), 3, "replicas = replicaCount 3")
    spec = dep["spec"]["template"]["spec"]
    ctr = spec["containers"][0]
    c.eq(ctr.get("image"), "registry.example.com/dedupd:0.1.0-test", "image")
    env = {e["name"]: e for e in ctr.get("env", [])}
    for setting, key in values["kafka"]["secretKeys"].items():
        name = "DEDUPD__KAFKA__" + setting.replace(".", "_").upper()
        ref = ((env.get(name) or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
        c.eq((ref.get("name"), ref.get("key")), (values["kafka"]["existingSecret"], key), f"{name} from the Secret")
    c.eq((env.get("DEDUPD__INPUT__MAX_RECORD_BYTES") or {}).get("value"), "2097152", "extraEnv")
    c.eq((env.get("RUST_LOG") or {}).get("value"), "info,dedupd=debug", "logLevel")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["name"]: m for m in ctr.get("volumeMounts", [])}
    c.eq((volumes.get("kafka-tls") or {}).get("secret", {}).get("secretName"), tls["secretName"], "TLS Secret volume")
    c.eq((mounts.get("kafka-tls") or {}).get("mountPath"), mount, "TLS Secret mounted")
    c.eq((volumes.get("admin-token") or {}).get("secret", {}).get("secretName"), admin_token["name"],
         "admin token Secret volume")
    c.eq((mounts.get("admin-token") or {}).get("mountPath"), admin_token["mountPath"], "admin token Secret mounted")
    ann = dep["spec"]["template"]["metadata"].get("annotations", {})
    c.eq((ann.get("prometheus.io/scrape"), ann.get("prometheus.io/port")), ("true", "9464"), "prometheus annotations")
    c.eq(spec.get("serviceAccountName"), kinds.get("ServiceAccount", {}).get("metadata", {}).get("name"),
         "pods use the chart's ServiceAccount")

    # ServiceMonitor.
    sm = kinds.get("ServiceMonitor")
    c.ok(sm is not None, "renders a ServiceMonitor")
    sm = sm or {}
    svc = kinds.get("Service", {})
    sm_sel = sm.get("spec", {}).get("selector", {}).get("matchLabels", {})
    svc_labels = svc.get("metadata", {}).get("labels", {})
    c.ok(bool(sm_sel) and sm_sel.items() <= svc_labels.items(), "ServiceMonitor selects the Service")
    endpoints = sm.get("spec", {}).get("endpoints", [])
    c.ok(bool(endpoints) and all(e.get("port") == "admin" and e.get("path") == "/metrics" for e in endpoints),
         "ServiceMonitor scrapes admin /metrics", f"{endpoints}")
    c.eq(sm.get("spec", {}).get("namespaceSelector", {}).get("matchNames"), [NAMESPACE], "ServiceMonitor namespace")
    c.eq(svc_labels.get(sm.get("spec", {}).get("jobLabel", "")), "dedupd",
         'ServiceMonitor jobLabel gives job="dedupd" (what files/alerts.yml selects)')
    c.eq(sm.get("metadata", {}).get("labels", {}).get("release"), "prometheus", "ServiceMonitor additionalLabels")

    # PrometheusRule: the groups of files/alerts.yml, verbatim.
    pr = kinds.get("PrometheusRule")
    c.ok(pr is not None, "renders a PrometheusRule")
    groups = (pr or {}).get("spec", {}).get("groups")
    alerts = yaml.safe_load((CHART / "files" / "alerts.yml").read_text()) or {}
    c.eq(groups, alerts.get("groups"), "PrometheusRule groups are files/alerts.yml's")
    rules_ok = bool(groups) and all(
        g.get("name") and g.get("rules") and all((r.get("alert") or r.get("record")) and r.get("expr") for r in g["rules"])
        for g in groups or []
    )
    c.ok(rules_ok, "every rule group has a name and rules with alert/record and expr")
    c.eq((pr or {}).get("metadata", {}).get("labels", {}).get("release"), "prometheus", "PrometheusRule additionalLabels")

    notes = next((t for p, t in out.items() if p.endswith("NOTES.txt")), "")
    c.ok("3 member(s)" in notes and "12 slice(s)" in notes, "NOTES.txt names members and slices")

    many, _ = render(helm, yaml, {"replicaCount": 10})
    notes = next((t for p, t in many.items() if p.endswith("NOTES.txt")), "")
    c.ok("WARNING: replicaCount (10) > config.filter.slices (8)" in notes and "2 member(s) will own no slice" in notes,
         "NOTES.txt warns when replicaCount > slices")

    # Values changes roll the pods.
    _, base_docs = render(helm, yaml, None)
    base_ann = by_kind(base_docs)["Deployment"]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    c.ok(ann.get("checksum/config") != base_ann, "a config change changes checksum/config")


def check_refused(c: Checks, helm, yaml, tomllib) -> None:
    """Values the chart must refuse at render time, each with its message."""
    c.scope = "refused"
    tls_base = {"kafka": {"tls": {"enabled": True, "secretName": "s"}}}
    cases = [
        ({"config": {"admin": {"listen": "0.0.0.0:1"}}}, "service.port"),
        ({"config": {"shutdown": {"timeout": "10s"}}}, "shutdownTimeoutSeconds"),
        ({"config": {"fitler": {"window": "5m"}}}, "dedupd has no section [fitler]"),
        ({"config": {"kafka": {"brokers": "b:1"}}}, "set kafka.brokers instead"),
        ({"config": {"filter": {"window": {"minutes": 5}}}}, "config.filter.window"),
        ({"kafka": {"brokers": ""}}, "kafka.brokers is required"),
        ({"kafka": {"tls": {"enabled": True}}}, "kafka.tls.secretName"),
        (tls_base, "security.protocol"),
        (deep_merge(tls_base, {"config": {"kafka": {"security.protocol": "SSL"}}, "kafka": {"tls": {"certKey": "c"}}}),
         "kafka.tls.keyKey"),
        ({"kafka": {"existingSecret": "creds"}, "config": {"kafka": {"sasl.password": "x"}}}, "set it in one place"),
        ({"shutdownTimeoutSeconds": 0}, "shutdownTimeoutSeconds must be at least 1"),
        ({"admin": {"keyEndpoints": "token"}}, "admin.keyEndpoints = token needs admin.tokenSecret.name"),
        ({"admin": {"keyEndpoints": "open"}}, "expected auto, off or token"),
    ]
    for values, message in cases:
        try:
            with native_stderr_captured():
                render(helm, yaml, values)
        except Exception as e:  # noqa: BLE001 - HelmRenderError, whose text carries the `fail` message
            c.ok(message in str(e), f"{values} is refused", f"error does not mention {message!r}: {e}")
        else:
            c.ok(False, f"{values} is refused", "it rendered")
    # Accepted: null removes a default (Helm's rule), so dedupd's built-in default applies.
    try:
        _, docs = render(helm, yaml, {"config": {"filter": {"window": None}}})
        conf = tomllib.loads(by_kind(docs)["ConfigMap"]["data"]["dedupd.toml"])
        c.ok("window" not in conf["filter"] and conf["filter"].get("slices") == 8,
             "config.filter.window: null leaves the key out of dedupd.toml", f"{conf['filter']}")
    except Exception as e:  # noqa: BLE001
        c.ok(False, "config.filter.window: null renders", str(e))
    # Accepted: TLS with only a CA (server-authenticated TLS, SASL for the client).
    ok_values = deep_merge(tls_base, {"config": {"kafka": {"security.protocol": "ssl"}}, "kafka": {"tls": {"caKey": "ca.pem"}}})
    try:
        render(helm, yaml, ok_values)
        c.ok(True, "TLS with a CA only renders")
    except Exception as e:  # noqa: BLE001
        c.ok(False, "TLS with a CA only renders", str(e))


def check_lint(c: Checks, helm, yaml) -> None:
    c.scope = "lint"
    for label, values in (("defaults", None), ("full-values", yaml.safe_load(FULL_VALUES.read_text()))):
        report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE)
        problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2] + [
            {"error": e} for e in report.get("errors", []) or []
        ]
        c.ok(not problems, f"helm lint --strict with {label}", "; ".join(str(p.get("error")) for p in problems))


def check_alerts_mirror(c: Checks) -> None:
    c.scope = "alerts"
    copy_path = CHART / "files" / "alerts.yml"
    if ALERTS_SOURCE.exists():
        c.ok(copy_path.read_bytes() == ALERTS_SOURCE.read_bytes(),
             "helm/dedupd/files/alerts.yml equals grafana/alerts.yml",
             "copy it: cp grafana/alerts.yml helm/dedupd/files/alerts.yml")
    else:
        say("grafana/alerts.yml does not exist yet: files/alerts.yml is the chart's own placeholder")


def check_dockerfile(c: Checks, chart_values: dict) -> None:
    c.scope = "Dockerfile"
    path = ROOT / "Dockerfile"
    if not c.ok(path.exists(), "Dockerfile exists"):
        return
    text = path.read_text()
    final = text[text.rfind("\nFROM ") :]  # the runtime stage
    c.ok(re.search(r"^USER\s+10001\b", final, re.M) is not None, "runtime stage runs as uid 10001 (runAsUser)")
    c.ok(re.search(rf"^EXPOSE\s+{int(chart_values['service']['port'])}\b", final, re.M) is not None, "EXPOSE service.port")
    c.ok('ENTRYPOINT ["dedupd"]' in final, "ENTRYPOINT dedupd")
    # Without --config, `dedupd run` reads DEDUPD_CONFIG's file, else ./config/dedupd.toml,
    # else /etc/dedupd/dedupd.toml: the image ships the last (the working directory is /).
    c.ok('CMD ["run"]' in final, "CMD runs without --config (so DEDUPD_CONFIG is honoured)")
    c.ok("COPY config/dedupd.toml /etc/dedupd/dedupd.toml" in final, "the image has /etc/dedupd/dedupd.toml")
    c.ok(re.search(r"^WORKDIR\s", final, re.M) is None, "no WORKDIR in the runtime stage (./config is /config)")
    c.ok("DEDUPD__ADMIN__LISTEN=0.0.0.0:9464" in final, "admin endpoint listens on all addresses")
    c.ok(re.search(r"^STOPSIGNAL\s+SIGTERM\b", final, re.M) is not None, "STOPSIGNAL SIGTERM")


def main() -> int:
    global CHART, FULL_VALUES, VERBOSE
    parser = argparse.ArgumentParser(description="Checks the dedupd Helm chart (see the module docstring).")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every check, and Helm's warnings")
    parser.add_argument("--chart", type=Path, default=CHART, help="chart directory (default: helm/dedupd)")
    args = parser.parse_args()
    VERBOSE, CHART = args.verbose, args.chart.resolve()
    FULL_VALUES = CHART / "ci" / "full-values.yaml"
    helm, yaml, tomllib = load_dependencies()
    schema = Schema(kubernetes_wheel())
    shipped = tomllib.loads(SHIPPED_TOML.read_text())
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    c = Checks()
    say(f"chart {CHART} with Helm SDK {helm.helm_sdk_version()}")
    steps = (
        lambda: check_lint(c, helm, yaml),
        lambda: check_defaults(c, schema, helm, yaml, tomllib, shipped, chart_values),
        lambda: check_full(c, schema, helm, yaml, tomllib, shipped, chart_values),
        lambda: check_refused(c, helm, yaml, tomllib),
        lambda: check_alerts_mirror(c),
        lambda: check_dockerfile(c, chart_values),
    )
    for step in steps:
        try:
            step()
        except Exception as e:  # noqa: BLE001 - a render error or a malformed document fails the step
            c.ok(False, "no unexpected error", f"{type(e).__name__}: {e}")
    c.scope = ""
    if c.failed:
        say(f"{len(c.failed)} check(s) failed:")
        for f in c.failed:
            print(f"  - {f}")
    print(f"helm_check: {c.passed} passed, {len(c.failed)} failed")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
