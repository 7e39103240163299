#!/usr/bin/env python3
"""Checks that dedupd's operations files cover the daemon (no cluster, no Prometheus needed):

    python3 scripts/ops_coverage.py [--selftest] [-v]

  metrics   every metric registered in src/metrics/ (the names given to b.counter(...),
            b.gauge(...), IntGauge::new(...), HistogramOpts::new(...) and the like) is on the
            dashboard (grafana/dedupd.json), in an alert (grafana/alerts.yml), or in
            grafana/unshown-metrics.txt with the reason it is not shown; the dashboard and the
            alerts name no metric src/metrics/ does not register; the unshown list names only
            registered metrics that are shown nowhere, each with a reason; docs/metrics.md lists
            the same metrics as src/metrics/.
  alerts    every alert of grafana/alerts.yml has a `for:`, a severity, a runbook_url ending in
            operate.md#<alert name in lower case>, and in grafana/alerts_test.yml a test that
            expects it to fire and one that expects it not to (exp_alerts: []); the tests name
            no alert the rules lack. When docs/operate.md exists, it has a section (an anchor)
            for every alert. (promtool runs the tests: scripts/prometheus_check.sh rules.)

--selftest first checks that each check fails where it must (a metric registered but shown
nowhere, an alert without tests, one without `for:`, an unshown entry without a reason, a
runbook section missing), on altered copies of the real inputs, then checks the real files.

Needs PyYAML; when it is not importable it is installed (pinned) into target/ops-coverage/.
Prints `ops_coverage: ok ...` or each problem, and exits 1 on any problem.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METRICS_RS = ROOT / "src" / "metrics"  # every .rs file of the folder, read as one
METRICS_DOC = ROOT / "docs" / "metrics.md"
OPERATE_DOC = ROOT / "docs" / "operate.md"
DASHBOARD = ROOT / "grafana" / "dedupd.json"
ALERTS = ROOT / "grafana" / "alerts.yml"
ALERTS_TEST = ROOT / "grafana" / "alerts_test.yml"
UNSHOWN = ROOT / "grafana" / "unshown-metrics.txt"
SITE = ROOT / "target" / "ops-coverage" / "site"
PYYAML = "PyYAML==6.0.2"

# The first argument of these calls is a metric's name (the Builder of src/metrics/ and the
# prometheus crate's constructors).
CONSTRUCTOR = re.compile(
    r"(?:\b(?:counter|int_gauge|gauge|histogram)|(?:IntCounter|IntGauge|Gauge|Counter|Histogram|IntCounterVec|"
    r"IntGaugeVec|GaugeVec|CounterVec|HistogramVec)::new|(?:Histogram)?Opts::new)\(\s*\"(dedupd_[a-z0-9_]+)\"",
)
HISTOGRAM_CONSTRUCTOR = re.compile(r"(?:\bhistogram|HistogramOpts::new)\(\s*\"(dedupd_[a-z0-9_]+)\"")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
METRIC_NAME = re.compile(r"\b(dedupd_[a-z0-9_]+)")


def say(msg: str) -> None:
    print(f"ops_coverage: {msg}", flush=True)


def load_yaml():
    try:
        return importlib.import_module("yaml")
    except ImportError:
        pass
    if not (SITE / "yaml").exists():
        say(f"installing {PYYAML} into {SITE.relative_to(ROOT)}")
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--target", str(SITE), PYYAML]
        result = subprocess.run(cmd, env=dict(os.environ, PIP_ROOT_USER_ACTION="ignore"), capture_output=True,
                                text=True)
        if result.returncode != 0:
            sys.exit(f"ops_coverage: error: `{' '.join(cmd)}` failed:\n{result.stderr.strip()}")
    sys.path.insert(0, str(SITE))
    importlib.invalidate_caches()
    return importlib.import_module("yaml")


# ---------------------------------------------------------------------------- inputs


def registered_metrics(source: str) -> tuple[set[str], set[str], list[str]]:
    """(metric names, histogram names, problems) of src/metrics/. A "dedupd_..." string that
    is not a constructor's first argument is a problem: the check cannot tell what it is."""
    names = set(CONSTRUCTOR.findall(source))
    histograms = set(HISTOGRAM_CONSTRUCTOR.findall(source))
    literals = set(re.findall(r"\"(dedupd_[a-z0-9_]+)\"", source))
    problems = [f"src/metrics/: \"{n}\" is not the name argument of a known metric constructor "
                "(teach scripts/ops_coverage.py the new form)" for n in sorted(literals - names)]
    if not names:
        problems.append("src/metrics/: no metric registrations found")
    return names, histograms, problems


def documented_metrics(text: str) -> set[str]:
    return {line.split("|")[1].strip().strip("`") for line in text.splitlines() if line.startswith("| `dedupd_")}


def dashboard_exprs(dash: dict) -> list[str]:
    exprs: list[str] = []

    def walk(panels):
        for p in panels or []:
            exprs.extend(t["expr"] for t in p.get("targets") or [] if t.get("expr"))
            walk(p.get("panels"))

    walk(dash.get("panels"))
    exprs.extend(a["expr"] for a in dash.get("annotations", {}).get("list", []) if a.get("expr"))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        exprs.append(q.get("query", "") if isinstance(q, dict) else (q or ""))
    return exprs


def alert_rules(rules_doc: dict) -> list[dict]:
    return [r for g in (rules_doc or {}).get("groups", []) for r in g.get("rules", []) if "alert" in r]


def parse_unshown(text: str) -> tuple[dict[str, str], list[str]]:
    """`metric  reason...` per line; # comments and blank lines ignored."""
    entries: dict[str, str] = {}
    problems: list[str] = []
    for i, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        reason = reason.strip()
        if not re.fullmatch(r"dedupd_[a-z0-9_]+", name):
            problems.append(f"grafana/unshown-metrics.txt:{i}: {name!r} is not a metric name")
            continue
        if len(reason) < 10:
            problems.append(f"grafana/unshown-metrics.txt:{i}: {name} has no reason (`{name}  why it is not shown`)")
        if name in entries:
            problems.append(f"grafana/unshown-metrics.txt:{i}: {name} is listed twice")
        entries[name] = reason
    return entries, problems


def base_names(names: set[str], histograms: set[str]) -> set[str]:
    out = set()
    for n in names:
        for suffix in HISTOGRAM_SUFFIXES:
            if n.endswith(suffix) and n[: -len(suffix)] in histograms:
                n = n[: -len(suffix)]
                break
        out.add(n)
    return out


def github_anchors(markdown: str) -> set[str]:
    """Anchors GitHub gives the headings (lower case, punctuation dropped, spaces to '-'), and
    explicit <a id|name="..."> anchors."""
    anchors = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", markdown))
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = re.sub(r"[`*_]", "", m.group(1)).strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


# ---------------------------------------------------------------------------- checks


def check_metrics(inputs: dict) -> tuple[list[str], str]:
    problems: list[str] = []
    names, histograms, p = registered_metrics(inputs["metrics_rs"])
    problems += p
    on_dashboard = base_names(set(METRIC_NAME.findall("\n".join(dashboard_exprs(inputs["dashboard"])))), histograms)
    rules = alert_rules(inputs["alerts"])
    in_alerts = base_names(set(METRIC_NAME.findall("\n".join(str(r.get("expr", "")) for r in rules))), histograms)
    unshown, p = parse_unshown(inputs["unshown"])
    problems += p
    for n in sorted(names):
        if n not in on_dashboard and n not in in_alerts and n not in unshown:
            problems.append(f"{n} is exported (src/metrics/) but on no dashboard panel, in no alert, and not in "
                            "grafana/unshown-metrics.txt: add a panel to grafana/dedupd.json, an alert to "
                            "helm/dedupd/files/alerts.yml, or a line `" + n + "  <why it is not shown>`")
    for n in sorted(on_dashboard - names):
        problems.append(f"grafana/dedupd.json queries {n}, which src/metrics/ does not register")
    for n in sorted(in_alerts - names):
        problems.append(f"grafana/alerts.yml uses {n}, which src/metrics/ does not register")
    for n in sorted(set(unshown) - names):
        problems.append(f"grafana/unshown-metrics.txt lists {n}, which src/metrics/ does not register")
    for n in sorted(set(unshown) & (on_dashboard | in_alerts)):
        problems.append(f"grafana/unshown-metrics.txt lists {n}, but it is shown (dashboard or alerts): remove the line")
    if inputs.get("metrics_doc") is not None:
        doc = documented_metrics(inputs["metrics_doc"])
        for n in sorted(names - doc):
            problems.append(f"{n} is registered in src/metrics/ but not listed in docs/metrics.md")
        for n in sorted(doc - names):
            problems.append(f"docs/metrics.md lists {n}, which src/metrics/ does not register")
    summary = (f"{len(names)} metrics: {len(names & on_dashboard)} on the dashboard, {len(names & in_alerts)} in "
               f"alerts, {len(names & set(unshown))} listed as not shown")
    return problems, summary


def check_alerts(inputs: dict) -> tuple[list[str], str]:
    problems: list[str] = []
    rules = alert_rules(inputs["alerts"])
    names = [r["alert"] for r in rules]
    if not names:
        problems.append("grafana/alerts.yml has no alerts")
    for n in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"alert {n} is defined twice")
    for r in rules:
        a = r["alert"]
        if not re.fullmatch(r"[0-9]+[smhd]", str(r.get("for", ""))):
            problems.append(f"{a} has no `for:` (got {r.get('for')!r})")
        if (r.get("labels") or {}).get("severity") not in ("critical", "warning", "info"):
            problems.append(f"{a} has no severity label (critical, warning or info)")
        url = str((r.get("annotations") or {}).get("runbook_url", ""))
        if not url.endswith(f"operate.md#{a.lower()}"):
            problems.append(f"{a}: runbook_url {url!r} does not end in operate.md#{a.lower()}")
    fires: set[str] = set()
    quiet: set[str] = set()
    tested: set[str] = set()
    for group in (inputs["alerts_test"] or {}).get("tests", []) or []:
        for t in group.get("alert_rule_test", []) or []:
            name = t.get("alertname")
            tested.add(name)
            (fires if t.get("exp_alerts") else quiet).add(name)
    for n in names:
        if n not in fires:
            problems.append(f"{n}: no test in grafana/alerts_test.yml expects it to fire (exp_alerts with an alert)")
        if n not in quiet:
            problems.append(f"{n}: no test in grafana/alerts_test.yml expects it not to fire (exp_alerts: [])")
    for n in sorted(tested - set(names)):
        problems.append(f"grafana/alerts_test.yml tests {n}, which grafana/alerts.yml does not define")
    runbooks = "docs/operate.md not written yet: runbook sections not checked"
    if inputs.get("operate_doc") is not None:
        anchors = github_anchors(inputs["operate_doc"])
        missing = [n for n in names if n.lower() not in anchors]
        for n in missing:
            problems.append(f"docs/operate.md has no section #{n.lower()} (the runbook_url of {n})")
        runbooks = f"{len(names) - len(missing)} of {len(names)} runbook sections in docs/operate.md"
    summary = f"{len(names)} alerts, each with for:, a runbook_url and tests that fire and do not fire; {runbooks}"
    return problems, summary


def run_checks(inputs: dict) -> list[str]:
    problems: list[str] = []
    for check in (check_metrics, check_alerts):
        p, summary = check(inputs)
        problems += p
        inputs.setdefault("_summaries", []).append(summary)
    return problems


def real_inputs(yaml) -> dict:
    return {
        "metrics_rs": "\n".join(p.read_text() for p in sorted(METRICS_RS.rglob("*.rs"))),
        "metrics_doc": METRICS_DOC.read_text() if METRICS_DOC.exists() else None,
        "operate_doc": OPERATE_DOC.read_text() if OPERATE_DOC.exists() else None,
        "dashboard": json.loads(DASHBOARD.read_text()),
        "alerts": yaml.safe_load(ALERTS.read_text()),
        "alerts_test": yaml.safe_load(ALERTS_TEST.read_text()),
        "unshown": UNSHOWN.read_text() if UNSHOWN.exists() else "",
    }


# ---------------------------------------------------------------------------- selftest


def selftest(yaml, verbose: bool) -> list[str]:
    """Each alteration of the real inputs must make the checks fail with the expected problem."""
    base = real_inputs(yaml)
    fake = "dedupd_selftest_fake_total"

    def with_metric(i):
        i["metrics_rs"] += f'\nfn fake(b: &Builder) {{ b.counter("{fake}", "A metric shown nowhere.", &[]); }}\n'

    def with_untested_alert(i):
        rule = copy.deepcopy(alert_rules(i["alerts"])[0])
        rule["alert"] = "DedupdSelftestUntested"
        rule["annotations"]["runbook_url"] = "https://example.com/operate.md#dedupdselftestuntested"
        i["alerts"]["groups"][0]["rules"].append(rule)

    def without_for(i):
        alert_rules(i["alerts"])[0].pop("for", None)

    def without_runbook(i):
        alert_rules(i["alerts"])[1]["annotations"].pop("runbook_url", None)

    def without_quiet_test(i):
        name = alert_rules(i["alerts"])[0]["alert"]
        for g in i["alerts_test"]["tests"]:
            g["alert_rule_test"] = [t for t in g.get("alert_rule_test", []) if t.get("alertname") != name or t.get("exp_alerts")]

    def unshown_without_reason(i):
        i["metrics_rs"] += f'\nfn fake(b: &Builder) {{ b.counter("{fake}", "A metric shown nowhere.", &[]); }}\n'
        i["unshown"] += f"\n{fake}\n"

    def unknown_on_dashboard(i):
        i["dashboard"]["panels"][1]["targets"][0]["expr"] = "sum(rate(dedupd_no_such_metric_total[5m]))"

    def operate_missing_section(i):
        names = [r["alert"] for r in alert_rules(i["alerts"])]
        i["operate_doc"] = "# Operate\n\n" + "".join(f"## {n}\n\ntext\n\n" for n in names[1:])

    cases = [
        ("a metric registered in src/metrics/ and shown nowhere", with_metric, fake),
        ("an alert without tests", with_untested_alert, "DedupdSelftestUntested: no test"),
        ("an alert without for:", without_for, "has no `for:`"),
        ("an alert without runbook_url", without_runbook, "runbook_url"),
        ("an alert without a does-not-fire test", without_quiet_test, "expects it not to fire"),
        ("an unshown-metrics entry without a reason", unshown_without_reason, "has no reason"),
        ("a dashboard query of an unregistered metric", unknown_on_dashboard, "dedupd_no_such_metric_total"),
        ("docs/operate.md without an alert's section", operate_missing_section, "docs/operate.md has no section"),
    ]
    failures: list[str] = []
    for what, alter, expect in cases:
        inputs = copy.deepcopy(base)
        alter(inputs)
        problems = run_checks(inputs)
        hit = [p for p in problems if expect in p]
        if hit:
            say(f"selftest ok: {what} fails the check: {hit[0]}")
        else:
            failures.append(f"selftest: {what} did not fail the check (problems: {problems or 'none'})")
    # A metric shown nowhere but listed with its reason passes.
    inputs = copy.deepcopy(base)
    with_metric(inputs)
    inputs["unshown"] += f"\n{fake}  made up by the selftest, shown nowhere on purpose\n"
    inputs["metrics_doc"] = None  # (docs/metrics.md does not list the made-up metric)
    problems = [p for p in run_checks(inputs) if fake in p]
    if problems:
        failures.append(f"selftest: a metric listed in grafana/unshown-metrics.txt with a reason fails: {problems}")
    elif verbose:
        say("selftest ok: a metric listed in grafana/unshown-metrics.txt with a reason passes")
    # The complete operate page passes.
    inputs = copy.deepcopy(base)
    inputs["operate_doc"] = "# Operate\n\n" + "".join(f"## {r['alert']}\n\ntext\n\n" for r in alert_rules(inputs["alerts"]))
    problems = [p for p in run_checks(inputs) if "operate.md" in p]
    if problems:
        failures.append(f"selftest: a complete docs/operate.md fails: {problems}")
    elif verbose:
        say("selftest ok: an operate page with a section per alert passes")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", action="store_true", help="first show that each check fails where it must")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    yaml = load_yaml()
    failures = selftest(yaml, args.verbose) if args.selftest else []
    inputs = real_inputs(yaml)
    problems = run_checks(inputs)
    for p in failures + problems:
        print(f"  FAIL  {p}")
    if failures or problems:
        say(f"{len(failures) + len(problems)} problem(s)")
        return 1
    say("ok: " + "; ".join(inputs["_summaries"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
