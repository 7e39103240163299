#!/usr/bin/env python3
"""Checks the dedupd Helm chart (helm/dedupd) without a helm binary or a cluster.

    python3 scripts/helm_check.py [-v] [--chart DIR] [--write-alerts] [--write]

--write-alerts regenerates grafana/alerts.yml from the chart's files/alerts.yml, and --write
(alias --write-schema) the chart's copy of config/dedupd.toml: values.yaml's `config:` block
between its BEGIN/END generated lines (every section but [admin] and [shutdown], every setting
with its default and its comment, [kafka] empty) and the `config` part of values.schema.json,
before the checks. A new section in config/dedupd.toml needs nothing else in the chart.

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
  * the Deployment: replicas (replicaCount), probes on /healthz and /readyz at the health port,
    terminationGracePeriodSeconds > shutdown timeout, DEDUPD__ADMIN__LISTEN, non-root and a
    read-only root filesystem, secrets as DEDUPD__KAFKA__* env vars, the TLS and admin
    token mounts, the config checksum annotation;
  * Service, ServiceMonitor, PodDisruptionBudget and PrometheusRule select the pods and
    name the right port;
  * values.yaml's `config:` block and values.schema.json's `config` are what --write writes
    from config/dedupd.toml (else: run --write);
  * values.schema.json: every value of values.yaml and ci/full-values.yaml has a typed entry,
    its `config` is config/dedupd.toml's sections, settings and types, and `helm template`
    (and `helm lint`) refuse wrong-typed, unknown and renamed values with a schema error
    (--set replicaCount=abc, --set-string service.port=x, --set replicas=3, ...);
  * the NetworkPolicy (networkPolicy.enabled): selects the pods, ingress only to the admin
    and health ports from networkPolicy.ingress.from, egress to the broker ports (from kafka.brokers or
    networkPolicy.egress.brokerPorts) and DNS, matches the Kubernetes API schema;
  * the PrometheusRule is files/alerts.yml with prometheusRule.* substituted: with the
    defaults it equals grafana/alerts.yml (generated from it: --write-alerts), with other
    values every series selector has that job and every alert that threshold, runbook_url
    and label; every alert has for:, a severity and a runbook_url;
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
import json
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
CHART_ALERTS = "files/alerts.yml"
SCHEMA_FILE = "values.schema.json"
# grafana/alerts.yml: the chart's files/alerts.yml with the chart's default values, under this header.
ALERTS_HEADER = """\
# Prometheus alerting rules for dedupd (metrics: docs/metrics.md; what to do for each alert:
# docs/operate.md, linked from each alert's runbook_url).
#
#   rule_files: [/path/to/dedupd/grafana/alerts.yml]
#
# GENERATED from helm/dedupd/files/alerts.yml (the Helm chart's PrometheusRule) with the chart's
# default values: edit that file, then run `python3 scripts/helm_check.py --write-alerts`.
# Unit tests: alerts_test.yml (`scripts/prometheus_check.sh rules`). Adjust to the deployment
# (the chart takes these from prometheusRule.*):
#   - job="{job}": the scrape job of the dedupd admin endpoints (prometheusRule.job);
#   - the thresholds (prometheusRule.thresholds): lag floor {consumerLag} records, input lag
#     {inputLag} records per topic or {inputLagSeconds} s, p99 latency {latencySeconds} s, resident
#     memory {memoryRatio} of the limit, snapshot age {checkpointAgeSeconds} s, {checkpointFailures} failed snapshot writes in 10m,
#     estimated FPR {estimatedFpr} (2x the default filter.fpr = 0.01: set 2x yours), {deadLettersPerSecond} dead
#     letter/s, {brokerSilenceSeconds} s of broker silence, late share {lateRatio};
#   - runbook_url: {runbookBaseUrl}#<alert name in lower case>
#     (prometheusRule.runbookBaseUrl: point it at your copy of the docs).
"""
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
    "NetworkPolicy": "networking.k8s.io/v1",
}
SCHEMA_MODELS = {
    "Deployment": "V1Deployment",
    "ConfigMap": "V1ConfigMap",
    "Service": "V1Service",
    "ServiceAccount": "V1ServiceAccount",
    "PodDisruptionBudget": "V1PodDisruptionBudget",
    "NetworkPolicy": "V1NetworkPolicy",
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


# ---------------------------------------------------------------------------- values schema

# Sections of dedupd.toml the chart renders from other values (and refuses under config).
CHART_OWNED_SECTIONS = {
    "admin": "not settable here: the chart renders [admin] from service.port and admin.*",
    "shutdown": "not settable here: the chart renders [shutdown] from shutdownTimeoutSeconds",
}


def toml_type_schema(value) -> dict:
    """The JSON Schema of a setting, from its value in config/dedupd.toml."""
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        items = toml_type_schema(value[0]) if value else {}
        return {"type": "array", "items": items} if items else {"type": "array"}
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: toml_type_schema(v) for k, v in value.items()},
                "additionalProperties": False}
    raise TypeError(f"unexpected TOML value {value!r}")


def config_schema(shipped: dict) -> dict:
    """values.schema.json's `config`: every section and setting of config/dedupd.toml with its
    type, nothing else (dedupd refuses unknown settings; the schema says so before the pod
    crash-loops). [kafka] takes any librdkafka setting; [admin] and [shutdown] are the chart's."""
    props: dict = {}
    for section, table in shipped.items():
        if section in CHART_OWNED_SECTIONS:
            props[section] = {"description": CHART_OWNED_SECTIONS[section], "type": "object"}
        elif section == "kafka":
            props[section] = {
                "description": "librdkafka settings by their dotted names, or nested maps (kafka.brokers is the "
                               "chart's own value)",
                "type": "object",
                "additionalProperties": {"type": ["string", "number", "boolean", "object"]},
            }
        else:
            props[section] = toml_type_schema(table)
    return {
        "description": "dedupd.toml, section by section (config/dedupd.toml documents every setting)",
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }


# ---------------------------------------------------------------------------- values.yaml's config

# values.yaml's `config:` block between these lines is generated from config/dedupd.toml.
CONFIG_BEGIN = ("  # BEGIN generated from config/dedupd.toml by `python3 scripts/helm_check.py --write`: "
                "edit that file, not this block")
CONFIG_END = "  # END generated from config/dedupd.toml"
# [kafka] in values.yaml: librdkafka settings only (brokers is kafka.brokers).
KAFKA_VALUES_COMMENT = """\
Extra librdkafka settings for every client, by their dotted names (no secrets here:
use kafka.existingSecret). Example:
  security.protocol: SASL_SSL
  sasl.mechanisms: SCRAM-SHA-512"""


def toml_comments(text: str) -> dict[tuple[str, str], list[str]]:
    """The comment lines above each setting of config/dedupd.toml, by (section, key), without
    their `#`. Comments above a section header (the file's own header) are dropped."""
    comments: dict[tuple[str, str], list[str]] = {}
    section, pending = "", []
    for line in text.splitlines():
        stripped = line.strip()
        header = re.fullmatch(r"\[([A-Za-z0-9_-]+)\]\s*(#.*)?", stripped)
        key = re.match(r"([A-Za-z0-9_-]+)\s*=", stripped)
        if stripped.startswith("#"):
            pending.append(stripped[1:].removeprefix(" ").rstrip())
        elif header:
            section, pending = header.group(1), []
        elif key and section:
            comments[(section, key.group(1))] = pending
            pending = []
    return comments


def yaml_scalar(value, where: str) -> str:
    """A setting's default as YAML that Helm reads back as the same value (JSON is YAML)."""
    if isinstance(value, bool) or isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if not re.fullmatch(r"-?[0-9]+\.[0-9]+", text):
            raise ValueError(f"{where} = {value!r}: write it with a decimal point and no exponent")
        return text
    if isinstance(value, list):
        return "[" + ", ".join(yaml_scalar(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    raise ValueError(f"{where}: a {type(value).__name__} is not a setting the chart can render "
                     "(strings, numbers, booleans and lists of them)")


def generated_config_block(text: str, tomllib) -> list[str]:
    """values.yaml's `config:` sections from config/dedupd.toml: every section but the chart's
    own ([admin], [shutdown]), every setting with its default and its comment; [kafka] empty
    (kafka.brokers is a value of its own). The lines between CONFIG_BEGIN and CONFIG_END."""
    shipped = tomllib.loads(text)
    comments = toml_comments(text)
    lines: list[str] = []
    for section, table in shipped.items():
        if section in CHART_OWNED_SECTIONS:
            continue
        if not isinstance(table, dict):
            raise ValueError(f"config/dedupd.toml: {section} is not a [section]")
        if section == "kafka":
            lines += ["  # " + c if c else "  #" for c in KAFKA_VALUES_COMMENT.splitlines()]
            lines.append("  kafka: {}")
            continue
        lines.append(f"  {section}:")
        for key, value in table.items():
            if (section, key) not in comments:
                raise ValueError(f"config/dedupd.toml: [{section}] {key} is not a `key = value` line of its own")
            lines += ["    # " + c if c else "    #" for c in comments[(section, key)]]
            lines.append(f"    {key}: {yaml_scalar(value, f'{section}.{key}')}")
        if not table:
            lines[-1] += " {}"
    return lines


def config_block(values_text: str) -> tuple[int, int]:
    """The line indexes of CONFIG_BEGIN and CONFIG_END in values.yaml."""
    lines = values_text.splitlines()
    if lines.count(CONFIG_BEGIN) != 1 or lines.count(CONFIG_END) != 1:
        raise ValueError(f"values.yaml must hold the lines {CONFIG_BEGIN!r} and {CONFIG_END!r} once each, "
                         "under `config:`")
    begin, end = lines.index(CONFIG_BEGIN), lines.index(CONFIG_END)
    if not (0 < begin < end and lines[begin - 1] == "config:"):
        raise ValueError(f"values.yaml: {CONFIG_BEGIN!r} must follow `config:`, before {CONFIG_END!r}")
    return begin, end


def values_with_config(values_text: str, tomllib) -> str:
    """values.yaml with its generated `config:` block rewritten from config/dedupd.toml."""
    lines = values_text.splitlines()
    begin, end = config_block(values_text)
    block = generated_config_block(SHIPPED_TOML.read_text(), tomllib)
    return "\n".join(lines[: begin + 1] + block + lines[end:]) + "\n"


def write_values_config(chart: Path, tomllib) -> None:
    path = chart / "values.yaml"
    path.write_text(values_with_config(path.read_text(), tomllib))
    say(f"wrote the config block of {path.relative_to(ROOT)} from config/dedupd.toml")


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


# ---------------------------------------------------------------------------- alerts


def prom_number(v) -> str:
    """A threshold as the chart prints it (dedupd.promNumber: Go's %v, integers without a fraction)."""
    if isinstance(v, float) and v.is_integer() or isinstance(v, int) and not isinstance(v, bool):
        return str(int(v))
    return repr(float(v))


def alert_substitutions(chart_values: dict, chart_name: str) -> dict[str, str]:
    """The ${name} values of files/alerts.yml for `chart_values`, as templates/prometheusrule.yaml
    computes them (check_alerts compares the two renderings)."""
    pr = chart_values["prometheusRule"]
    subs = {"job": pr.get("job") or chart_values.get("nameOverride") or chart_name,
            "runbookBaseUrl": pr["runbookBaseUrl"]}
    for name, value in pr["thresholds"].items():
        if name == "fprFactor":
            fpr = ((chart_values.get("config") or {}).get("filter") or {}).get("fpr") or 0.01
            subs["estimatedFpr"] = prom_number(float(value) * float(fpr))
        else:
            subs[name] = prom_number(value)
    return subs


def generated_alerts(chart: Path, chart_values: dict, chart_name: str) -> str:
    """grafana/alerts.yml: the header, then files/alerts.yml from `groups:` on with the defaults."""
    text = (chart / CHART_ALERTS).read_text()
    body = text[text.index("\ngroups:") + 1:]
    subs = alert_substitutions(chart_values, chart_name)
    for name, value in subs.items():
        body = body.replace("${%s}" % name, value)
    left = re.findall(r"\$\{\w*\}", body)
    if left:
        raise ValueError(f"{CHART_ALERTS}: no value for {sorted(set(left))}")
    return ALERTS_HEADER.format(**subs) + body


def write_alerts(chart: Path, yaml) -> None:
    chart_values = yaml.safe_load((chart / "values.yaml").read_text())
    name = yaml.safe_load((chart / "Chart.yaml").read_text())["name"]
    ALERTS_SOURCE.write_text(generated_alerts(chart, chart_values, name))
    say(f"wrote {ALERTS_SOURCE.relative_to(ROOT)}")


def write_schema_config(chart: Path, tomllib) -> None:
    path = chart / SCHEMA_FILE
    schema = json.loads(path.read_text())
    schema["properties"]["config"] = config_schema(tomllib.loads(SHIPPED_TOML.read_text()))
    path.write_text(json.dumps(schema, indent=2) + "\n")
    say(f"wrote the config part of {path.relative_to(ROOT)} from config/dedupd.toml")


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
    c.eq(len(containers), 1 + len(values.get("extraContainers") or []), "dedupd's container and extraContainers")
    c.eq(containers[0].get("name") if containers else None, "dedupd", "dedupd's container first")
    ctr = containers[0] if containers else {}
    port = int(values["service"]["port"])
    ports = {p.get("name"): p.get("containerPort") for p in ctr.get("ports", [])}
    c.eq(ports.get("admin"), port, "container port named admin")
    c.eq(ports.get("health"), int(values["probes"]["port"]), "container port named health (probes.port)")
    c.eq(ctr.get("args"), ["run", "--config", "/etc/dedupd/dedupd.toml"], "container args")

    # Probes.
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        get = (ctr.get(probe) or {}).get("httpGet") or {}
        c.eq((get.get("path"), get.get("port")), (path, "health"), f"{probe} on {path} at the health port")
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
    c.ok(not missing, "dedupd.toml has every section of config/dedupd.toml",
         f"missing {missing}: run python3 scripts/helm_check.py --write")
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
    c.eq(conf.get("admin", {}).get("health_listen"), f"0.0.0.0:{int(values['probes']['port'])}",
         "admin.health_listen in the container (probes.port)")
    c.eq(conf.get("shutdown", {}).get("timeout"), f"{int(values['shutdownTimeoutSeconds'])}s", "shutdown.timeout")
    c.eq(conf.get("kafka", {}).get("brokers"), values["kafka"]["brokers"], "kafka.brokers")
    return conf


def check_defaults(c: Checks, schema, helm, yaml, tomllib, shipped: dict, chart_values: dict) -> None:
    c.scope = "defaults"
    out, docs = render(helm, yaml, None)
    kinds = check_common(c, schema, out, docs, chart_values)
    for optional in ("ServiceMonitor", "PrometheusRule", "ServiceAccount", "NetworkPolicy"):
        c.ok(optional not in kinds, f"no {optional} by default")
    conf = check_toml(c, tomllib, kinds.get("ConfigMap", {}), shipped, chart_values)
    # With the default values the chart's dedupd.toml is config/dedupd.toml, but for the admin
    # address (0.0.0.0 in a pod) and the brokers (kafka.brokers).
    for section, table in shipped.items():
        for key, want in table.items():
            if (section, key) in (("admin", "listen"), ("admin", "health_listen"), ("kafka", "brokers")):
                continue
            got = conf.get(section, {}).get(key, "<missing>")
            c.ok(got == want, f"default {section}.{key} equals config/dedupd.toml",
                 f"chart {got!r}, config/dedupd.toml {want!r}: run python3 scripts/helm_check.py --write")
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
    # extraVolumes, extraVolumeMounts, extraContainers: a sidecar beside dedupd sharing a volume.
    c.eq((volumes.get("shared") or {}).get("emptyDir"), {"sizeLimit": "16Mi"}, "extraVolumes")
    c.eq((mounts.get("shared") or {}).get("mountPath"), "/shared", "extraVolumeMounts reach the dedupd container")
    names = [x.get("name") for x in spec["containers"]]
    c.eq(names, ["dedupd", "log-shipper"], "extraContainers follow the dedupd container")
    sidecar = spec["containers"][-1]
    c.eq((sidecar.get("image"), sidecar.get("args")), ("registry.example.com/shipper:1.0", ["--watch", "/shared"]),
         "extraContainers pass through unchanged")
    c.eq([m.get("name") for m in sidecar.get("volumeMounts", [])], ["shared"], "the sidecar mounts only its own volumes")
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
         'ServiceMonitor jobLabel gives job="dedupd" (what the PrometheusRule selects by default)')
    c.eq(sm.get("metadata", {}).get("labels", {}).get("release"), "prometheus", "ServiceMonitor additionalLabels")

    # PrometheusRule: the groups of files/alerts.yml, verbatim.
    pr = kinds.get("PrometheusRule")
    c.ok(pr is not None, "renders a PrometheusRule")
    groups = (pr or {}).get("spec", {}).get("groups")
    alerts = yaml.safe_load(generated_alerts(CHART, values, "dedupd")) or {}
    c.eq(groups, alerts.get("groups"), "PrometheusRule groups are files/alerts.yml's with these values (FPR 2 x 0.001)")
    fpr_rule = next((r for g in groups or [] for r in g["rules"] if r.get("alert") == "DedupdFilterFprAboveTarget"), {})
    c.ok(fpr_rule.get("expr", "").endswith("> 0.002"), "the FPR alert follows config.filter.fpr", fpr_rule.get("expr"))
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
        ({"config": {"fitler": {"window": "5m"}}}, "additional properties 'fitler' not allowed"),
        ({"config": {"kafka": {"brokers": "b:1"}}}, "set kafka.brokers instead"),
        ({"config": {"filter": {"window": {"minutes": 5}}}}, "/config/filter/window"),
        ({"kafka": {"brokers": ""}}, "/kafka/brokers"),
        ({"kafka": {"tls": {"enabled": True}}}, "kafka.tls.secretName"),
        (tls_base, "security.protocol"),
        (deep_merge(tls_base, {"config": {"kafka": {"security.protocol": "SSL"}}, "kafka": {"tls": {"certKey": "c"}}}),
         "kafka.tls.keyKey"),
        ({"kafka": {"existingSecret": "creds"}, "config": {"kafka": {"sasl.password": "x"}}}, "set it in one place"),
        ({"shutdownTimeoutSeconds": 0}, "/shutdownTimeoutSeconds"),
        ({"admin": {"keyEndpoints": "token"}}, "admin.keyEndpoints = token needs admin.tokenSecret.name"),
        ({"admin": {"keyEndpoints": "open"}}, "/admin/keyEndpoints"),
        ({"networkPolicy": {"enabled": True}, "kafka": {"brokers": "kafka"}}, "has no :port"),
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


def check_alerts(c: Checks, helm, yaml, chart_values: dict) -> None:
    """The chart's PrometheusRule: files/alerts.yml with prometheusRule.* substituted; with the
    defaults it is grafana/alerts.yml (generated from it), with other values every rule selects
    that job and uses those thresholds; every alert has for:, a severity and a runbook_url."""
    c.scope = "alerts"
    chart_name = yaml.safe_load((CHART / "Chart.yaml").read_text())["name"]
    source = (CHART / CHART_ALERTS).read_text()
    c.ok('job="dedupd"' not in source, f"no hard-coded job=\"dedupd\" in {CHART_ALERTS}")
    try:
        want = generated_alerts(CHART, chart_values, chart_name)
    except ValueError as e:
        c.ok(False, "grafana/alerts.yml can be generated", str(e))
        return
    have = ALERTS_SOURCE.read_text() if ALERTS_SOURCE.exists() else ""
    c.ok(have == want, "grafana/alerts.yml is files/alerts.yml with the chart's defaults",
         "run: python3 scripts/helm_check.py --write-alerts")

    def rules_of(values):
        _, docs = render(helm, yaml, deep_merge({"prometheusRule": {"enabled": True}}, values))
        groups = by_kind(docs)["PrometheusRule"]["spec"]["groups"]
        return groups, [r for g in groups for r in g["rules"]]

    groups, rules = rules_of({})
    file_groups = (yaml.safe_load(have) or {}).get("groups") if have else None
    c.eq(groups, file_groups, "PrometheusRule with the default values = grafana/alerts.yml")
    names = [r.get("alert") for r in rules]
    c.ok(len(names) == len(set(names)) and all(names), "alert names are unique", f"{names}")
    base = chart_values["prometheusRule"]["runbookBaseUrl"]
    for r in rules:
        a = r.get("alert", "?")
        c.ok(bool(r.get("for")) and re.fullmatch(r"[0-9]+[smh]", str(r.get("for"))) is not None, f"{a} has for:",
             f"{r.get('for')!r}")
        c.ok((r.get("labels") or {}).get("severity") in ("critical", "warning", "info"), f"{a} has a severity")
        ann = r.get("annotations") or {}
        c.ok(bool(ann.get("summary")) and bool(ann.get("description")), f"{a} has summary and description")
        c.eq(ann.get("runbook_url"), f"{base}#{a.lower()}", f"{a} runbook_url")

    # Other values: the job label, the thresholds, the runbook base and the extra labels.
    custom = {
        "prometheusRule": {
            "job": "clicks-dedup",
            "runbookBaseUrl": "https://runbooks.example.com/dedupd.html",
            "alertLabels": {"team": "streaming"},
            "thresholds": {"consumerLag": 5000, "inputLag": 250000, "inputLagSeconds": 120, "latencySeconds": 20,
                           "memoryRatio": 0.8, "checkpointAgeSeconds": 900, "checkpointFailures": 5, "fprFactor": 3,
                           "deadLettersPerSecond": 0.5, "brokerSilenceSeconds": 45, "lateRatio": 0.05},
        },
        "config": {"filter": {"fpr": 0.001}},
    }
    _, custom_rules = rules_of(custom)
    by_name = {r["alert"]: r for r in custom_rules}
    selectors_ok, bad = True, []
    for r in custom_rules:
        expr = r["expr"]
        # Every series selector names the job (a bare metric name would match other deployments).
        for m in re.finditer(r"\b(up|dedupd_[a-z0-9_]+)(\{[^}]*\})?", expr):
            if not m.group(2) or 'job="clicks-dedup"' not in m.group(2):
                selectors_ok = False
                bad.append(f"{r['alert']}: {m.group(0)}")
        c.eq(r["annotations"]["runbook_url"], f"https://runbooks.example.com/dedupd.html#{r['alert'].lower()}",
             f"prometheusRule.runbookBaseUrl reaches {r['alert']}")
        c.eq(r["labels"].get("team"), "streaming", f"prometheusRule.alertLabels reach {r['alert']}")
    c.ok(selectors_ok, "every series selector of every rule has job=prometheusRule.job", "; ".join(bad))
    c.ok(not any('job="dedupd"' in r["expr"] for r in custom_rules), 'no job="dedupd" left with prometheusRule.job set')
    for alert, fragment in (("DedupdConsumerLagGrowing", "> 5000"), ("DedupdInputLagHigh", "> 250000"),
                            ("DedupdInputLagSecondsHigh", "> 120"), ("DedupdLatencyHigh", "> 20"),
                            ("DedupdMemoryNearLimit", "> 0.8"),
                            ("DedupdCheckpointStale", "> 900"),
                            ("DedupdCheckpointFailures", "> 5"), ("DedupdFilterFprAboveTarget", "> 0.003"),
                            ("DedupdDeadLetterBurst", "> 0.5"), ("DedupdBrokerSilent", "> 45"),
                            ("DedupdLateRecords", "> 0.05")):
        expr = (by_name.get(alert) or {}).get("expr", "")
        c.ok(re.search(re.escape(fragment) + r"\b(?![.0-9])", expr) is not None,
             f"{alert} takes its threshold from prometheusRule.thresholds ({fragment})", expr)
    # The job defaults to nameOverride, like the ServiceMonitor's jobLabel.
    _, renamed = rules_of({"nameOverride": "dedup-eu"})
    c.ok(all('job="dedup-eu"' in r["expr"] for r in renamed), "prometheusRule.job defaults to the chart's name")


def check_schema(c: Checks, helm, yaml, tomllib, chart_values: dict) -> None:
    """values.schema.json types every value, matches config/dedupd.toml, and `helm template` /
    `helm lint` refuse wrong-typed, unknown and renamed values with a schema error."""
    c.scope = "schema"
    path = CHART / SCHEMA_FILE
    if not c.ok(path.exists(), f"{SCHEMA_FILE} exists"):
        return
    schema = json.loads(path.read_text())
    c.eq(schema.get("$schema"), "http://json-schema.org/draft-07/schema#", "JSON Schema draft-07")
    c.eq(schema.get("additionalProperties"), False, "unknown top-level values are refused")
    shipped = tomllib.loads(SHIPPED_TOML.read_text())
    c.ok(schema.get("properties", {}).get("config") == config_schema(shipped),
         "the schema's config is config/dedupd.toml's sections, settings and types",
         "values.schema.json is out of date with config/dedupd.toml: run python3 scripts/helm_check.py --write")
    values_text = (CHART / "values.yaml").read_text()
    try:
        want = values_with_config(values_text, tomllib)
    except ValueError as e:
        c.ok(False, "values.yaml's config block is generated from config/dedupd.toml", str(e))
    else:
        c.ok(values_text == want, "values.yaml's config block is generated from config/dedupd.toml",
             "helm/dedupd/values.yaml is out of date with config/dedupd.toml: run python3 scripts/helm_check.py --write")

    def node_for(node: dict, key: str):
        props = node.get("properties") or {}
        if key in props:
            return props[key]
        extra = node.get("additionalProperties")
        return extra if isinstance(extra, dict) else None

    def covered(value, node: dict, where: str, problems: list[str]) -> None:
        if not (node.get("type") or node.get("anyOf") or node.get("oneOf")):
            problems.append(f"{where}: no type")
            return
        if isinstance(value, dict) and (node.get("properties") or isinstance(node.get("additionalProperties"), dict)):
            for k, v in value.items():
                sub = node_for(node, k)
                if sub is None:
                    problems.append(f"{where}.{k}: not in the schema")
                else:
                    covered(v, sub, f"{where}.{k}", problems)

    for label, values in (("values.yaml", chart_values), ("ci/full-values.yaml", yaml.safe_load(FULL_VALUES.read_text()))):
        problems: list[str] = []
        covered(values, schema, "", problems)
        c.ok(not problems, f"every value of {label} has a typed schema entry", "; ".join(problems))
        with helm.Chart.load(str(CHART)) as chart:
            try:
                chart.validate_schema(values)
                c.ok(True, f"{label} validates")
            except Exception as e:  # noqa: BLE001
                c.ok(False, f"{label} validates", str(e))

    # (how the values are given, the values, what the schema error must name)
    cases = [
        ("--set replicaCount=abc", helm.parse_set_string("replicaCount=abc"), "/replicaCount"),
        ("--set-string replicaCount=3", helm.parse_set_string_values("replicaCount=3"), "/replicaCount"),
        ("--set-string service.port=x", helm.parse_set_string_values("service.port=x"), "/service/port"),
        ("--set service.port=70000", helm.parse_set_string("service.port=70000"), "/service/port"),
        ("--set image.pullPolicy=Sometimes", helm.parse_set_string("image.pullPolicy=Sometimes"), "/image/pullPolicy"),
        ("--set config.filter.slices=eight", helm.parse_set_string("config.filter.slices=eight"), "/config/filter/slices"),
        ("--set config.filter.deletable=maybe", helm.parse_set_string("config.filter.deletable=maybe"),
         "/config/filter/deletable"),
        ("--set config.filter.windwo=5m", helm.parse_set_string("config.filter.windwo=5m"), "'windwo'"),
        ("--set replicas=3", helm.parse_set_string("replicas=3"), "'replicas'"),
        ("--set adminPort=9464", helm.parse_set_string("adminPort=9464"), "'adminPort'"),
        ("--set networkPolicy.enabled=yes", helm.parse_set_string("networkPolicy.enabled=yes"), "/networkPolicy/enabled"),
        ("--set networkPolicy.ingress.from=prometheus", helm.parse_set_string("networkPolicy.ingress.from=prometheus"),
         "/networkPolicy/ingress/from"),
        ("--set-string networkPolicy.egress.brokerPorts[0]=x",
         helm.parse_set_string_values("networkPolicy.egress.brokerPorts[0]=x"), "/networkPolicy/egress/brokerPorts/0"),
        ("--set prometheusRule.thresholds.consumerLag=lots",
         helm.parse_set_string("prometheusRule.thresholds.consumerLag=lots"), "/prometheusRule/thresholds/consumerLag"),
        ("--set prometheusRule.job=a\"b", {"prometheusRule": {"job": 'a"b'}}, "/prometheusRule/job"),
        ("extraContainers without an image", {"extraContainers": [{"name": "sidecar"}]}, "/extraContainers/0"),
        ("--set extraContainers=sidecar", helm.parse_set_string("extraContainers=sidecar"), "/extraContainers"),
    ]
    for how, values, where in cases:
        try:
            with native_stderr_captured():
                render(helm, yaml, values)
        except Exception as e:  # noqa: BLE001 - HelmValuesError with the schema's message
            text = str(e)
            c.ok("schema" in text and where in text, f"helm template {how} fails with a schema error at {where}",
                 text.strip())
        else:
            c.ok(False, f"helm template {how} fails with a schema error at {where}", "it rendered")
    # helm lint reports the same.
    with native_stderr_captured():
        report = helm.lint(str(CHART), helm.parse_set_string("replicaCount=abc"), strict=True, namespace=NAMESPACE)
    errors = [str(m.get("error")) for m in report.get("messages", []) if m.get("severity", 0) >= 2] + [
        str(e) for e in report.get("errors", []) or []]
    c.ok(any("/replicaCount" in e and "want integer" in e for e in errors),
         "helm lint --set replicaCount=abc reports the schema error", "; ".join(errors) or "no error")
    # Good values in other forms pass: quoted percentages, an integer given as a float.
    for how, values in (("podDisruptionBudget.maxUnavailable=50%", {"podDisruptionBudget": {"maxUnavailable": "50%"}}),
                        ("--set replicaCount=3", helm.parse_set_string("replicaCount=3")),
                        ("config.filter.fpr=1", {"config": {"filter": {"fpr": 1}}})):
        try:
            render(helm, yaml, values)
            c.ok(True, f"{how} is accepted")
        except Exception as e:  # noqa: BLE001
            c.ok(False, f"{how} is accepted", str(e))


def check_network_policy(c: Checks, schema: "Schema", helm, yaml) -> None:
    c.scope = "networkPolicy"
    full = yaml.safe_load(FULL_VALUES.read_text())
    np_values = full["networkPolicy"]
    _, docs = render(helm, yaml, full)
    kinds = by_kind(docs)
    np = kinds.get("NetworkPolicy")
    if not c.ok(np is not None, "full-values renders a NetworkPolicy"):
        return
    spec = np.get("spec", {})
    pod_labels = kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    sel = spec.get("podSelector", {}).get("matchLabels", {})
    c.ok(bool(sel) and sel.items() <= pod_labels.items(), "NetworkPolicy selects the pods")
    c.eq(sorted(spec.get("policyTypes", [])), ["Egress", "Ingress"], "policyTypes Ingress and Egress")
    ingress = spec.get("ingress", [])
    c.eq(len(ingress), 1, "one ingress rule")
    rule = ingress[0] if ingress else {}
    ctr_ports = {p["name"] for p in kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["ports"]}
    c.eq(rule.get("ports"), [{"port": "admin", "protocol": "TCP"}, {"port": "health", "protocol": "TCP"}],
         "ingress only to the admin and health ports")
    c.ok({"admin", "health"} <= ctr_ports, "the admin and health ports are named container ports")
    c.eq(rule.get("from"), np_values["ingress"]["from"], "ingress from networkPolicy.ingress.from")
    egress = spec.get("egress", [])
    broker_rule = egress[0] if egress else {}
    c.eq(broker_rule.get("ports"), [{"port": 9093, "protocol": "TCP"}],
         "egress to the ports of kafka.brokers (9093, once)")
    c.eq(broker_rule.get("to"), np_values["egress"].get("brokers") or None, "egress to networkPolicy.egress.brokers")
    dns = egress[1] if len(egress) > 1 else {}
    c.eq(sorted((p["port"], p["protocol"]) for p in dns.get("ports", [])), [(53, "TCP"), (53, "UDP")], "egress to DNS")
    c.eq(dns.get("to"), np_values["egress"]["dns"]["to"], "DNS egress to networkPolicy.egress.dns.to")
    c.eq(egress[2:], np_values["egress"].get("extra") or [], "networkPolicy.egress.extra appended")

    # Defaults when on: the admin port from anywhere, the broker port of kafka.brokers, DNS anywhere.
    _, docs = render(helm, yaml, {"networkPolicy": {"enabled": True}})
    np = by_kind(docs).get("NetworkPolicy", {})
    errors: list[str] = []
    schema.validate(np, "V1NetworkPolicy", "NetworkPolicy", errors)
    c.ok(not errors, "NetworkPolicy with defaults matches the Kubernetes API schema", "; ".join(errors))
    c.eq(np.get("spec", {}).get("ingress"),
         [{"ports": [{"port": "admin", "protocol": "TCP"}, {"port": "health", "protocol": "TCP"}]}],
         "ingress.from empty: the admin and health ports from every source, no other port")
    c.eq([r.get("ports") for r in np.get("spec", {}).get("egress", [])],
         [[{"port": 9092, "protocol": "TCP"}], [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]],
         "egress: the broker port of kafka.brokers and DNS")
    _, docs = render(helm, yaml, {"networkPolicy": {"enabled": True, "egress": {"brokerPorts": [9092, 9094],
                                                                                "dns": {"enabled": False}}}})
    egress = by_kind(docs).get("NetworkPolicy", {}).get("spec", {}).get("egress", [])
    c.eq(egress, [{"ports": [{"port": 9092, "protocol": "TCP"}, {"port": 9094, "protocol": "TCP"}]}],
         "networkPolicy.egress.brokerPorts and dns.enabled=false")


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
    health = int(chart_values["probes"]["port"])
    c.ok(f"DEDUPD__ADMIN__HEALTH_LISTEN=0.0.0.0:{health}" in final, "health endpoint on probes.port, all addresses")
    c.ok(re.search(rf"^EXPOSE\s+.*\b{health}\b", final, re.M) is not None, "EXPOSE probes.port")
    c.ok(re.search(r"^STOPSIGNAL\s+SIGTERM\b", final, re.M) is not None, "STOPSIGNAL SIGTERM")


def main() -> int:
    global CHART, FULL_VALUES, VERBOSE
    parser = argparse.ArgumentParser(description="Checks the dedupd Helm chart (see the module docstring).")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every check, and Helm's warnings")
    parser.add_argument("--chart", type=Path, default=CHART, help="chart directory (default: helm/dedupd)")
    parser.add_argument("--write-alerts", action="store_true",
                        help="write grafana/alerts.yml from the chart's files/alerts.yml and default values, then check")
    parser.add_argument("--write", "--write-schema", action="store_true", dest="write",
                        help="write values.yaml's config block and the config part of values.schema.json from "
                             "config/dedupd.toml, then check")
    args = parser.parse_args()
    VERBOSE, CHART = args.verbose, args.chart.resolve()
    FULL_VALUES = CHART / "ci" / "full-values.yaml"
    helm, yaml, tomllib = load_dependencies()
    if args.write_alerts:
        write_alerts(CHART, yaml)
    if args.write:
        try:
            write_values_config(CHART, tomllib)
        except ValueError as e:
            sys.exit(f"helm_check: error: {e}")
        write_schema_config(CHART, tomllib)
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
        lambda: check_schema(c, helm, yaml, tomllib, chart_values),
        lambda: check_network_policy(c, schema, helm, yaml),
        lambda: check_alerts(c, helm, yaml, chart_values),
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
