#!/usr/bin/env python3
"""Checks grafana/dedupd.json (and the metric names of grafana/alerts.yml); stdlib only.

Driven by scripts/prometheus_check.sh:

  ops_check.py static --dashboard D --metrics-doc M [--rules R] [--promtool P]
      The dashboard is well formed (importable: __inputs, a datasource variable, unique panel
      ids, grid positions, one refId per target); every dedupd_* name in its queries and in the
      rules file is documented in docs/metrics.md (histograms with _bucket/_sum/_count); with
      --promtool, every query is valid PromQL (promtool check rules on a generated file).
  ops_check.py wait-ready --prometheus URL --pid PID --timeout S
      Waits for Prometheus's /-/ready (fails early when PID exits).
  ops_check.py live --prometheus URL --dashboard D --job JOB --scrapes N --wait S
      Waits until the target of JOB is up and was scraped N times, resolves the template
      variables from Prometheus like Grafana does, then evaluates every panel query (and every
      annotation query, which may be empty) with /api/v1/query until every panel query returns
      at least one series or S seconds have passed since the first successful scrape. A query
      answering only NaN (0/0, e.g. a quantile with no observation in the window) is retried
      for a while and then passes with a note; with --strict it fails.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

# Grafana's built-in interval variables, as the live check substitutes them.
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "5m",
    "__range_s": "300",
    "__range_ms": "300000",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class Query:
    """One PromQL expression of the dashboard and where it is."""

    def __init__(self, where, expr, kind):
        self.where = where  # e.g. 'panel 12 "Throughput" [B]'
        self.expr = expr  # as written in the dashboard, with Grafana variables
        self.kind = kind  # "panel", "variable" or "annotation"


def substitute(expr, values):
    """Grafana's $var, ${var}, ${var:format} and [[var]] forms, longest names first."""

    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3) or m.group(4)
        if name not in values:
            raise KeyError(name)
        return values[name]

    pattern = r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)(?::\w+)?\]\]|\$(__\w+)|\$(\w+)"
    # $__rate_interval must not match a shorter name: \w+ is greedy, so it takes the whole word.
    return re.sub(pattern, repl, expr)


def iter_panels(panels):
    for p in panels:
        yield p
        # A collapsed row keeps its panels inside it.
        yield from iter_panels(p.get("panels", []) or [])


def label_values_arg(query):
    """label_values(selector, label) -> (selector, label); label_values(label) -> (None, label)."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query, re.S)
    if m:
        return m.group(1).strip(), m.group(2)
    m = re.fullmatch(r"\s*label_values\(\s*(\w+)\s*\)\s*", query)
    if m:
        return None, m.group(1)
    return None, None


def variable_query(v):
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    return q or v.get("definition", "")


def collect(dash):
    """Panel, variable and annotation queries of the dashboard."""
    queries = []
    for p in iter_panels(dash.get("panels", [])):
        for t in p.get("targets", []) or []:
            if "expr" in t:
                where = f'panel {p.get("id")} "{p.get("title", "")}" [{t.get("refId", "?")}]'
                queries.append(Query(where, t["expr"], "panel"))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            sel, _ = label_values_arg(variable_query(v))
            if sel:
                queries.append(Query(f'variable ${v["name"]}', sel, "variable"))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            queries.append(Query(f'annotation "{a.get("name", "")}"', a["expr"], "annotation"))
    return queries


def documented_metrics(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        if line.startswith("| `dedupd_"):
            cells = [c.strip() for c in line.split("|")]
            out[cells[1].strip("`")] = cells[2]
    return out


def undocumented(names, doc):
    bad = []
    for n in sorted(set(names)):
        if n in doc:
            continue
        base = next((n[: -len(s)] for s in HISTOGRAM_SUFFIXES if n.endswith(s)), None)
        if base and doc.get(base) == "histogram":
            continue
        bad.append(n)
    return bad


def used_metric_names(exprs):
    names = set()
    for e in exprs:
        names.update(re.findall(r"\bdedupd_[A-Za-z0-9_]+", e))
    return names


def base_metric(n, doc):
    for s in HISTOGRAM_SUFFIXES:
        if n.endswith(s) and doc.get(n[: -len(s)]) == "histogram":
            return n[: -len(s)]
    return n


def static_values(dash):
    values = dict(BUILTINS)
    for v in dash.get("templating", {}).get("list", []):
        values[v["name"]] = ".*" if v.get("includeAll") else "dedupd"
    values["DS_PROMETHEUS"] = "prometheus"
    return values


def check_structure(dash):
    problems = []
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
        problems.append(f"schemaVersion {dash.get('schemaVersion')!r}: want an int >= 36")
    for key in ("title", "uid", "panels", "templating"):
        if not dash.get(key):
            problems.append(f"missing top-level {key!r}")
    inputs = dash.get("__inputs", [])
    if not any(i.get("name") == "DS_PROMETHEUS" and i.get("pluginId") == "prometheus" for i in inputs):
        problems.append("__inputs has no DS_PROMETHEUS prometheus data source (needed for import)")
    variables = dash.get("templating", {}).get("list", [])
    ds_vars = {v["name"] for v in variables if v.get("type") == "datasource" and v.get("query") == "prometheus"}
    if not ds_vars:
        problems.append("templating has no prometheus data-source variable")
    names = [v.get("name") for v in variables]
    if len(names) != len(set(names)):
        problems.append(f"duplicate template variable names: {names}")
    ds_uids = {"${%s}" % n for n in ds_vars} | {"${DS_PROMETHEUS}"}
    ids = []
    cells = {}
    for p in iter_panels(dash.get("panels", [])):
        pid, title, ptype = p.get("id"), p.get("title", ""), p.get("type")
        ids.append(pid)
        where = f'panel {pid} "{title}"'
        if not ptype:
            problems.append(f"{where}: no type")
        g = p.get("gridPos") or {}
        if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
            problems.append(f"{where}: gridPos needs integer x, y, w, h")
            continue
        if g["x"] < 0 or g["w"] < 1 or g["x"] + g["w"] > 24:
            problems.append(f"{where}: gridPos x={g['x']} w={g['w']} outside the 24 columns")
        for dx in range(g["w"]):
            for dy in range(g["h"]):
                other = cells.setdefault((g["x"] + dx, g["y"] + dy), pid)
                if other != pid:
                    problems.append(f"{where}: overlaps panel {other}")
                    break
            else:
                continue
            break
        if ptype == "row":
            continue
        if not title:
            problems.append(f"panel {pid}: no title")
        targets = p.get("targets") or []
        if not targets:
            problems.append(f"{where}: no targets")
        refs = [t.get("refId") for t in targets]
        if len(refs) != len(set(refs)) or None in refs:
            problems.append(f"{where}: refIds must be unique and present: {refs}")
        for t in targets:
            if not (t.get("expr") or "").strip():
                problems.append(f"{where} [{t.get('refId')}]: empty expr")
            ds = (t.get("datasource") or p.get("datasource") or {}).get("uid")
            if ds not in ds_uids:
                problems.append(f"{where} [{t.get('refId')}]: datasource uid {ds!r}, want one of {sorted(ds_uids)}")
    if len(ids) != len(set(ids)) or None in ids:
        problems.append("panel ids must be unique and present")
    return problems


def promtool_check(promtool, queries, values):
    """Every query as a recording rule; on failure, one file per query to name the bad ones."""

    def check(rules):
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
            json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        try:
            r = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
            return r.returncode == 0, (r.stdout + r.stderr).strip()
        finally:
            os.unlink(f.name)

    rules = [{"record": f"dashboard:query_{i}", "expr": substitute(q.expr, values)} for i, q in enumerate(queries)]
    ok, _ = check(rules)
    if ok:
        return []
    bad = []
    for q, rule in zip(queries, rules):
        ok, out = check([rule])
        if not ok:
            msg = [l.strip() for l in out.splitlines() if l.strip() and not l.startswith("Checking")]
            bad.append(f"{q.where}: invalid PromQL: {rule['expr']}\n      {' '.join(msg)}")
    return bad or ["promtool rejected the generated rules file, but no single query"]


def cmd_static(args):
    dash = json.load(open(args.dashboard, encoding="utf-8"))
    doc = documented_metrics(args.metrics_doc)
    problems = check_structure(dash)
    queries = collect(dash)
    values = static_values(dash)
    for q in queries:
        try:
            substitute(q.expr, values)
        except KeyError as e:
            problems.append(f"{q.where}: unknown variable ${e.args[0]} in {q.expr}")
    if problems:
        return report_static(problems)
    names = used_metric_names(q.expr for q in queries)
    for n in undocumented(names, doc):
        problems.append(f"dashboard uses {n}, which docs/metrics.md does not list")
    if args.rules:
        for n in undocumented(used_metric_names([open(args.rules, encoding="utf-8").read()]), doc):
            problems.append(f"{os.path.basename(args.rules)} uses {n}, which docs/metrics.md does not list")
    if args.promtool:
        problems += promtool_check(args.promtool, queries, values)
    if problems:
        return report_static(problems)
    panels = [p for p in iter_panels(dash["panels"]) if p.get("type") != "row"]
    unused = sorted(set(doc) - {base_metric(n, doc) for n in names})
    print(
        f"ok: dashboard {dash['title']!r}: {len(panels)} panels, "
        f"{sum(q.kind == 'panel' for q in queries)} expressions, "
        f"{sum(q.kind == 'variable' for q in queries)} variable and "
        f"{sum(q.kind == 'annotation' for q in queries)} annotation queries; "
        f"{len(doc) - len(unused)} of {len(doc)} documented metrics shown"
    )
    if unused:
        print("note: documented metrics without a panel: " + ", ".join(unused))
    return 0


def report_static(problems):
    print(f"FAILED: dashboard: {len(problems)} problem(s)")
    for p in problems:
        print("  - " + p)
    return 1


# ---------------------------------------------------------------- live


# Prometheus is on loopback: never through an http_proxy of the environment.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def api(base, path, params=None, timeout=10):
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with OPENER.open(url, timeout=timeout) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:  # 400/422 carry a JSON error body
        try:
            return json.load(e)
        except Exception:
            return {"status": "error", "errorType": f"http {e.code}", "error": str(e)}
    except (urllib.error.URLError, OSError) as e:
        return {"status": "error", "errorType": "connection", "error": str(e)}


def instant(base, expr):
    return api(base, "/api/v1/query", {"query": expr})


def cmd_wait_ready(args):
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            os.kill(args.pid, 0)
        except OSError:
            return 1
        try:
            with OPENER.open(args.prometheus + "/-/ready", timeout=2) as r:
                if r.status == 200:
                    return 0
        except Exception:
            pass
        time.sleep(0.2)
    return 1


def series_values(result):
    data = result.get("data", {})
    rtype, res = data.get("resultType"), data.get("result")
    if rtype == "vector":
        return [float(s["value"][1]) for s in res]
    if rtype == "matrix":
        return [float(v[1]) for s in res for v in s["values"]]
    if rtype == "scalar":
        return [float(res[1])]
    return []


def value_range(vals):
    real = [v for v in vals if not math.isnan(v)]
    lo, hi = min(real), max(real)
    text = f"{lo:.4g}" if lo == hi else f"{lo:.4g} .. {hi:.4g}"
    return text + (" (some NaN)" if len(real) < len(vals) else "")


def target_state(base, job):
    t = api(base, "/api/v1/targets", {"state": "active"})
    for tg in t.get("data", {}).get("activeTargets", []):
        if tg.get("labels", {}).get("job") == job:
            return tg
    return {}


def resolve_variables(base, dash):
    """Grafana's defaults: 'All' (allValue) for includeAll variables, else the first value."""
    values = dict(BUILTINS)
    problems = []
    for v in dash.get("templating", {}).get("list", []):
        name = v["name"]
        if v.get("type") == "datasource":
            values[name] = "prometheus"
            continue
        if v.get("type") != "query":
            values[name] = str((v.get("current") or {}).get("value") or ".*")
            continue
        sel, label = label_values_arg(variable_query(v))
        found = []
        if label and sel:
            r = instant(base, substitute(sel, values))
            found = sorted({s["metric"][label] for s in r.get("data", {}).get("result", []) if label in s["metric"]})
        elif label:
            r = api(base, f"/api/v1/label/{label}/values")
            found = sorted(r.get("data", []))
        if not found:
            problems.append(f"variable ${name}: {variable_query(v)} has no values")
        if v.get("includeAll"):
            values[name] = v.get("allValue") or ("(" + "|".join(map(re.escape, found)) + ")" if found else ".*")
        else:
            values[name] = found[0] if found else ""
    values["DS_PROMETHEUS"] = "prometheus"
    return values, problems


def cmd_live(args):
    dash = json.load(open(args.dashboard, encoding="utf-8"))
    base = args.prometheus.rstrip("/")
    started = time.monotonic()

    # 1. The target is up and has been scraped a few times (rates need two samples).
    first_up = None
    deadline = started + args.wait
    scrapes = 0
    while time.monotonic() < deadline:
        r = instant(base, f'count_over_time(up{{job="{args.job}"}}[5m]) and on() (max(up{{job="{args.job}"}}) == 1)')
        vals = series_values(r)
        scrapes = int(vals[0]) if vals else 0
        if scrapes and first_up is None:
            first_up = time.monotonic()
            deadline = first_up + args.wait
        if scrapes >= args.scrapes:
            break
        time.sleep(0.5)
    else:
        tg = target_state(base, args.job)
        print(f"FAILED: target of job {args.job} not up and scraped {args.scrapes} times within {args.wait} s")
        print(f"  target: {tg.get('scrapeUrl')} health={tg.get('health')} lastError={tg.get('lastError')!r}")
        return 1

    # 2. Every query, again and again while some return nothing, until the deadline. Queries
    #    answering only NaN (0/0: no events in the window) get a grace period, then count as ok.
    queries = collect(dash)
    nan_grace = min(15.0, args.wait / 4)
    eval_started = time.monotonic()
    rounds = 0
    while True:
        rounds += 1
        values, var_problems = resolve_variables(base, dash)
        results = []
        for q in queries:
            expr = substitute(q.expr, values)
            r = instant(base, expr)
            if r.get("status") != "success":
                state = "error"
                detail = f"{r.get('errorType')}: {r.get('error')}"
            else:
                vals = series_values(r)
                if not vals:
                    state, detail = ("ok", "0 series") if q.kind == "annotation" else ("empty", "no series")
                elif all(math.isnan(v) for v in vals):
                    state, detail = "nan", f"{len(vals)} series, all NaN"
                else:
                    state, detail = "ok", f"{len(vals)} series, {value_range(vals)}"
            results.append((q, expr, state, detail, r.get("errorType")))
        now = time.monotonic()
        failing = [x for x in results if x[2] in (("error", "empty", "nan") if args.strict else ("error", "empty"))]
        nans = [] if args.strict else [x for x in results if x[2] == "nan"]
        parse_errors = [x for x in failing if x[4] == "bad_data"]
        done = not failing and not var_problems and (not nans or now - eval_started >= nan_grace)
        if done or now >= deadline or (parse_errors and len(parse_errors) == len(failing)):
            break
        time.sleep(2)

    elapsed = time.monotonic() - started
    panels = {q.where.split(" [")[0] for q in queries if q.kind == "panel"}
    n_panel_exprs = sum(q.kind == "panel" for q in queries)
    header = (
        f"{sum(q.kind == 'variable' for q in queries)} variables, "
        f"{sum(q.kind == 'annotation' for q in queries)} annotations; "
        f"{scrapes}+ scrapes, {rounds} round(s), {elapsed:.0f} s"
    )
    for q, expr, state, detail, _ in results:
        print(f"  {state:5} {q.where}: {detail}")
    if var_problems or failing:
        print(
            f"FAILED: {len(failing) + len(var_problems)} of {len(queries)} queries "
            f"({len(panels)} panels, {n_panel_exprs} expressions, {header})"
        )
        for p in var_problems:
            print(f"  - {p}")
        exposed = set(api(base, "/api/v1/label/__name__/values").get("data", []))
        for q, expr, state, detail, _ in failing:
            print(f"  - {q.where}: {detail}\n      {expr}")
            missing = sorted(n for n in used_metric_names([expr]) if n not in exposed)
            if missing:
                print(f"      not scraped from the target: {', '.join(missing)}")
        tg = target_state(base, args.job)
        print(f"  target {tg.get('scrapeUrl')}: health={tg.get('health')} lastError={tg.get('lastError')!r}")
        return 1
    if nans:
        print("note: NaN only (no events in the rate window): " + "; ".join(q.where for q, *_ in nans))
    print(f"ok: {len(panels)} panels, {n_panel_exprs} expressions ({header})")
    return 0


def scalar(base, expr):
    """The value of a query answering one series, else None."""
    r = instant(base, expr)
    result = r.get("data", {}).get("result", []) if r.get("status") == "success" else []
    return float(result[0]["value"][1]) if len(result) == 1 else None


def cmd_rise_and_fall(args):
    """Passes once each EXPR (one series each) has been above 0 and is back at 0."""
    start = time.monotonic()
    peak = {expr: 0.0 for expr in args.expr}
    peak_at, now, passed = {}, {}, set()
    while time.monotonic() - start < args.wait:
        for expr in args.expr:
            if expr in passed:
                continue
            now[expr] = scalar(args.prometheus, expr)
            # Every scrape counts, not only those this loop happens to look at.
            seen = scalar(args.prometheus, f"max_over_time(({expr})[10m:1s])") or 0.0
            if seen > peak[expr]:
                peak[expr], peak_at[expr] = seen, time.monotonic() - start
            if peak[expr] > 0 and now[expr] == 0:
                passed.add(expr)
                print(f"ok: {expr} rose to {peak[expr]:.0f} (at {peak_at[expr]:.0f} s) and was back at 0 "
                      f"after {time.monotonic() - start:.0f} s", flush=True)
        if len(passed) == len(args.expr):
            return 0
        time.sleep(1)
    for expr in args.expr:
        if expr not in passed:
            print(f"FAILED: {expr} peaked at {peak[expr]:.0f} and is {now.get(expr)} after {args.wait:.0f} s "
                  f"(it must rise above 0, then return to 0)")
    return 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("static")
    s.add_argument("--dashboard", required=True)
    s.add_argument("--metrics-doc", required=True)
    s.add_argument("--rules")
    s.add_argument("--promtool")
    w = sub.add_parser("wait-ready")
    w.add_argument("--prometheus", required=True)
    w.add_argument("--pid", type=int, required=True)
    w.add_argument("--timeout", type=float, default=30)
    l = sub.add_parser("live")
    l.add_argument("--prometheus", required=True)
    l.add_argument("--dashboard", required=True)
    l.add_argument("--job", default="dedupd")
    l.add_argument("--scrapes", type=int, default=5)
    l.add_argument("--wait", type=float, default=60)
    l.add_argument("--strict", action="store_true", help="a query answering only NaN fails too")
    r = sub.add_parser("rise-and-fall")
    r.add_argument("--prometheus", required=True)
    r.add_argument("--expr", required=True, action="append", help="repeat for several series")
    r.add_argument("--wait", type=float, default=120)
    args = ap.parse_args()
    commands = {"static": cmd_static, "wait-ready": cmd_wait_ready, "live": cmd_live, "rise-and-fall": cmd_rise_and_fall}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
