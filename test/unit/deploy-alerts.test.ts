import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { parser } from '@prometheus-io/lezer-promql';
import { parse } from 'yaml';
import { registry } from '../../src/core/telemetry/metrics';
import '../../src/modules/observability/queue-metrics';
import { itWithTool, PROMTOOL } from '../support/tools';
import { read, ROOT, yamlDocuments } from './deploy-support';

/**
 * deploy/prometheus (the alerting rules and their promtool unit tests), deploy/grafana (the
 * dashboard) and the PrometheusRule in deploy/monitoring, held to the metrics Ordo exports and to
 * the runbooks in docs/alerts.md. PromQL is parsed with Prometheus's own grammar (lezer-promql).
 */

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleFile {
  groups: { name: string; rules: Rule[] }[];
}
interface RuleTest {
  eval_time: string;
  alertname: string;
  exp_alerts: unknown[];
}
interface Panel {
  type: string;
  title: string;
  datasource?: { type: string; uid: string };
  targets?: { expr: string; datasource?: { uid: string } }[];
  panels?: Panel[];
}
interface Dashboard {
  schemaVersion: number;
  uid: string;
  templating: { list: { name: string; type: string; query: unknown; includeAll?: boolean }[] };
  panels: Panel[];
}

const ALERTS = 'deploy/prometheus/ordo-alerts.yml';
const ALERT_TESTS = 'deploy/prometheus/ordo-alerts.test.yml';
const DASHBOARD = 'deploy/grafana/ordo-dashboard.json';

const rules = (parse(read(ALERTS)) as RuleFile).groups.flatMap((g) => g.rules);
const dashboard = JSON.parse(read(DASHBOARD)) as Dashboard;
const panels = (list: Panel[]): Panel[] => list.flatMap((p) => [p, ...panels(p.panels ?? [])]);
const dashboardExprs = panels(dashboard.panels).flatMap((p) => (p.targets ?? []).map((t) => t.expr));

/** The series names a scrape of Ordo carries: each registered metric, with a histogram's series. */
async function exportedSeries(): Promise<Set<string>> {
  const names = new Set<string>();
  for (const m of await registry.getMetricsAsJSON()) {
    names.add(m.name);
    if (String(m.type) === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(m.name + s);
    if (String(m.type) === 'summary') for (const s of ['_sum', '_count']) names.add(m.name + s);
  }
  return names;
}

/**
 * The metric names an expression selects. Grafana's interval variables become a duration first;
 * a syntax error, or a selector that does not name its metric (`{__name__=…}`), is an error.
 */
function selectedMetrics(expr: string): string[] {
  const promql = expr.replace(/\$__(rate_interval|interval|range)\b/g, '5m');
  const names: string[] = [];
  const problems: string[] = [];
  parser.parse(promql).iterate({
    enter(node) {
      if (node.type.isError) problems.push(`syntax error at ${node.from}`);
      if (node.name === 'VectorSelector') {
        const id = node.node.getChild('Identifier');
        if (id) names.push(promql.slice(id.from, id.to));
        else problems.push(`a selector without a metric name: ${promql.slice(node.from, node.to)}`);
      }
    },
  });
  if (problems.length > 0) throw new Error(`${expr}: ${problems.join('; ')}`);
  return names;
}

/** The anchors GitHub gives the headings of a Markdown page. */
function anchors(rel: string): Set<string> {
  return new Set(
    [...read(rel).matchAll(/^#{1,6} (.+)$/gm)].map((m) =>
      m[1]
        .trim()
        .toLowerCase()
        .replace(/[^\w\- ]/g, '')
        .replace(/ /g, '-'),
    ),
  );
}

const itWithPromtool = itWithTool(PROMTOOL, 'the alerting rules checks (promtool check rules, promtool test rules)');

describe('deploy/prometheus and deploy/grafana', () => {
  itWithPromtool('passes promtool check rules', () => {
    const r = spawnSync('promtool', ['check', 'rules', ALERTS], { cwd: ROOT, encoding: 'utf8', timeout: 30_000 });
    expect({ status: r.status, out: r.stdout + r.stderr }).toEqual({
      status: 0,
      out: expect.stringContaining('SUCCESS: 7 rules found') as unknown,
    });
  });

  itWithPromtool('passes its promtool unit tests', () => {
    const r = spawnSync('promtool', ['test', 'rules', path.basename(ALERT_TESTS)], {
      cwd: path.join(ROOT, path.dirname(ALERT_TESTS)),
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect({ status: r.status, out: r.stdout + r.stderr }).toEqual({
      status: 0,
      out: expect.stringContaining('SUCCESS') as unknown,
    });
  });

  it('has the seven alerts, each with a severity, a summary, a description and a runbook in docs/alerts.md', () => {
    expect(rules.map((r) => r.alert).sort()).toEqual(
      [
        'OrdoDatabaseNotReady',
        'OrdoExportFailures',
        'OrdoLeaseRenewalFailures',
        'OrdoOrphanRateHigh',
        'OrdoQueueAgeHigh',
        'OrdoReaperLagging',
        'OrdoStepFailureRatioHigh',
      ].sort(),
    );
    const runbooks = anchors('docs/alerts.md');
    for (const r of rules) {
      expect([r.alert, r.labels?.severity]).toEqual([r.alert, expect.stringMatching(/^(warning|critical)$/)]);
      expect([r.alert, r.annotations?.summary, r.annotations?.description]).toEqual([
        r.alert,
        expect.any(String),
        expect.any(String),
      ]);
      expect(r.annotations?.runbook_url).toBe(`docs/alerts.md#${r.alert.toLowerCase()}`);
      expect([r.alert, runbooks.has(r.alert.toLowerCase())]).toEqual([r.alert, true]);
    }
  });

  it('unit-tests every alert both firing and silent', () => {
    const tests = (parse(read(ALERT_TESTS)) as { tests: { alert_rule_test: RuleTest[] }[] }).tests.flatMap(
      (t) => t.alert_rule_test,
    );
    for (const r of rules) {
      const mine = tests.filter((t) => t.alertname === r.alert);
      expect([r.alert, mine.some((t) => t.exp_alerts.length > 0), mine.some((t) => t.exp_alerts.length === 0)]).toEqual(
        [r.alert, true, true],
      );
    }
  });

  it('selects only series that Ordo exports, in the rules, their tests and the dashboard', async () => {
    const exported = await exportedSeries();
    const testSeries = (parse(read(ALERT_TESTS)) as { tests: { input_series: { series: string }[] }[] }).tests.flatMap(
      (t) => t.input_series.map((s) => s.series),
    );
    const exprs = [...rules.map((r) => r.expr), ...dashboardExprs, ...testSeries];
    const unknown = exprs.flatMap((e) =>
      selectedMetrics(e)
        .filter((n) => !exported.has(n))
        .map((n) => `${n} in ${e}`),
    );
    expect(unknown).toEqual([]);
    // The check bites: a renamed metric is caught.
    expect(selectedMetrics('rate(orchestrator_steps_orphaned[5m])').filter((n) => !exported.has(n))).toEqual([
      'orchestrator_steps_orphaned',
    ]);
    expect(() => selectedMetrics('sum(rate(orchestrator_runs_total[5m])')).toThrow(/syntax error/);
  });

  it('ships the same groups to the Prometheus Operator (deploy/monitoring/prometheus-rule.yaml)', () => {
    const [rule] = yamlDocuments('deploy/monitoring/prometheus-rule.yaml') as { spec: RuleFile }[];
    expect(rule.spec.groups).toEqual((parse(read(ALERTS)) as RuleFile).groups);
  });

  it('is a Grafana dashboard with a Prometheus data source variable and a tenant variable', () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(39);
    const vars = Object.fromEntries(dashboard.templating.list.map((v) => [v.name, v]));
    expect(vars.datasource).toMatchObject({ type: 'datasource', query: 'prometheus' });
    expect(vars.tenant).toMatchObject({ type: 'query', includeAll: true });
    const withQueries = panels(dashboard.panels).filter((p) => p.type !== 'row');
    expect(withQueries.length).toBeGreaterThanOrEqual(15);
    for (const p of withQueries) {
      expect([p.title, p.datasource?.uid, (p.targets ?? []).length > 0]).toEqual([p.title, '${datasource}', true]);
      for (const t of p.targets ?? []) expect(t.datasource?.uid).toBe('${datasource}');
    }
  });

  it('charts throughput, failures, queues, latency, the engine health series, streams and limit hits', () => {
    const charted = new Set(dashboardExprs.flatMap(selectedMetrics));
    for (const name of [
      'orchestrator_runs_total',
      'orchestrator_step_duration_seconds_count',
      'orchestrator_step_duration_seconds_bucket',
      'orchestrator_queue_depth',
      'orchestrator_oldest_ready_seconds',
      'orchestrator_dispatch_latency_seconds_bucket',
      'orchestrator_steps_orphaned_total',
      'orchestrator_reaper_last_success_timestamp_seconds',
      'orchestrator_lease_renewal_failures_total',
      'orchestrator_database_ready',
      'orchestrator_export_failures_total',
      'orchestrator_stream_connections',
      'orchestrator_limit_hits_total',
    ])
      expect([name, charted.has(name)]).toEqual([name, true]);
    // Per-tenant series are filtered by the tenant variable, except beside the orphans, which carry
    // no tenant label (the claims there are the whole fleet's too).
    for (const p of panels(dashboard.panels))
      for (const { expr } of p.title === 'Orphaned attempts' ? [] : (p.targets ?? []))
        if (/orchestrator_(runs_total|queue_depth|oldest_ready|dispatch_latency|step_duration|limit_hits)/.test(expr))
          expect([p.title, expr]).toEqual([p.title, expect.stringContaining('tenant=~"$tenant"')]);
  });
});
