import type { PluginContext, StepLogLine } from '../../plugins/plugin';
import { makeRedactor } from '../../secrets/redact';

export interface TestContext extends PluginContext {
  lines: StepLogLine[];
  controller: AbortController;
}

/** A real PluginContext for running a plugin's execute() on its own (tests and benchmarks). */
export function pluginContext(over: Partial<PluginContext> & { secrets?: string[] } = {}): TestContext {
  const controller = new AbortController();
  const lines: StepLogLine[] = [];
  // The redactor the engine uses for the secrets injected into a step.
  const redact = makeRedactor(over.secrets ?? []);
  const { secrets: _s, ...rest } = over;
  return {
    tenantId: 'tenant-a',
    dagId: 'dag',
    dagVersion: 1,
    runId: '00000000-0000-0000-0000-000000000001',
    stepId: 'step',
    attempt: 1,
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    signal: controller.signal,
    egress: [],
    timeoutMs: 10_000,
    log: (level, message) => lines.push({ ts: new Date().toISOString(), level, message }),
    redact,
    ...rest,
    lines,
    controller,
  };
}
