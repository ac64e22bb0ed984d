import type { PluginContext, StepLogLine } from '../../plugins/plugin';
import { makeRedactor } from '../../secrets/redact';
import { Sandbox, type SandboxSettings } from '../sandbox';

export interface TestContext extends PluginContext {
  lines: StepLogLine[];
  controller: AbortController;
}

const sandboxes = new Map<string, Sandbox>();

/**
 * A Sandbox with the default settings and the given ones, one per distinct setting for the test
 * file (closed by closeTestSandboxes). By default the loopback address tests serve from is
 * allowed to IP-literal egress entries, as an operator would list a range of its own.
 */
export function testSandbox(over: Partial<SandboxSettings> = {}): Sandbox {
  const settings: SandboxSettings = {
    cliRequired: true,
    uidBase: 0x7000_0000,
    allowPrivate: ['127.0.0.1'],
    scriptProcesses: 2,
    ...over,
  };
  const key = JSON.stringify(settings);
  let s = sandboxes.get(key);
  if (!s) {
    s = new Sandbox(settings);
    sandboxes.set(key, s);
  }
  return s;
}

/** Closes the sandboxes testSandbox made (their script processes and runtime directories). */
export async function closeTestSandboxes(): Promise<void> {
  const all = [...sandboxes.values()];
  sandboxes.clear();
  await Promise.all(all.map((s) => s.close()));
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
    sandbox: testSandbox(),
    timeoutMs: 10_000,
    log: (level, message) => lines.push({ ts: new Date().toISOString(), level, message }),
    redact,
    ...rest,
    lines,
    controller,
  };
}
